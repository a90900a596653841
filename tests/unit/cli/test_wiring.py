"""The CLI hands the two composing commands what they need of another processor."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from services.cli.main import COMMAND_MODULES
from services.cli.wiring import WIRED, WIRED_APPS, state_probe
from services.contract.exits import UsageError
from services.contract.processors import PROCESSORS


def test_each_command_module_is_handed_exactly_the_keywords_its_register_takes() -> None:
    assert set(WIRED) <= set(COMMAND_MODULES)
    for name in COMMAND_MODULES:
        params = inspect.signature(importlib.import_module(name).register).parameters
        keywords = {p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY}
        assert keywords == set(WIRED.get(name, {})), name


def test_each_app_is_handed_exactly_the_keywords_its_build_takes() -> None:
    modules = {spec.module for spec in PROCESSORS.values()}
    assert set(WIRED_APPS) <= modules
    assert WIRED_APPS["services.audit.app"].keys() == {"read_table"}
    for name in modules:
        params = inspect.signature(importlib.import_module(name).build).parameters
        keywords = {p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY}
        assert keywords == set(WIRED_APPS.get(name, {})), name


def test_a_file_that_is_no_target_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "target.yaml"
    bad.write_text("agent: 7\n")
    with pytest.raises(UsageError, match="target.yaml"):
        state_probe(bad)


def test_a_target_without_a_state_probe_is_a_usage_error(tmp_path: Path) -> None:
    target = tmp_path / "target.yaml"
    target.write_text("agent: {kind: http, url: 'http://127.0.0.1:1/chat'}\n")
    with pytest.raises(UsageError, match="no state probe"):
        state_probe(target)
