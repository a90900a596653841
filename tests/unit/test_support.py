"""The test helpers that decide where tests listen: each pytest-xdist worker its own ports."""

from __future__ import annotations

from collections import deque

import pytest

from tests import support  # its test_port_range would be collected as a test if imported
from tests.support import TEST_PORTS_ENV, free_ports, xdist_slice


def test_outside_xdist_the_whole_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert xdist_slice(20_000, 32_000) == (20_000, 32_000)


def test_each_worker_its_own_equal_slice_and_no_two_overlap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
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


def test_ports_drawn_one_after_another_are_never_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    # 20 draws from a range of 20 ports: all different only if no free port is handed out
    # twice (at random, 20 distinct draws of 20 would happen 2 times in 10^8); then none left.
    monkeypatch.setenv(TEST_PORTS_ENV, "24000-24019")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setattr(support, "_HANDED", deque(maxlen=512))  # none handed by other tests
    assert sorted(free_ports(1) for _ in range(20)) == list(range(24000, 24020))
    with pytest.raises(RuntimeError, match="no 1 free ports"):
        free_ports(1)
