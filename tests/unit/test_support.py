"""The test helpers that decide where tests listen: each pytest-xdist worker its own ports."""

from __future__ import annotations

import pytest

from tests import support  # its test_port_range would be collected as a test if imported
from tests.support import TEST_PORTS_ENV, xdist_slice


def test_outside_xdist_the_whole_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert xdist_slice(20_000, 32_000) == (20_000, 32_000)


def test_each_worker_its_own_equal_slice_and_no_two_overlap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    slices = []
    for n in range(4):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{n}")
        slices.append(xdist_slice(20_000, 32_000))
    assert slices == [(20_000, 23_000), (23_000, 26_000), (26_000, 29_000), (29_000, 32_000)]


def test_the_configured_block_is_sliced_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_PORTS_ENV, "17000-18999")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert support.test_port_range() == (18_000, 19_000)
