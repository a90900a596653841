"""The CLI hands the two composing commands what they need of another processor."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from types import ModuleType

import pytest

import services
from services.cli import main
from services.cli.wiring import WIRED_APPS, state_probe
from services.contract.exits import UsageError
from services.contract.processors import PROCESSORS


def test_every_commands_module_is_registered_in_main() -> None:
    """`main.register_commands` calls every `services.*.commands` module's `register`
    (what each is handed is checked by mypy: the calls are plain calls)."""
    root = Path(services.__file__).parent
    modules = {f"services.{p.parent.name}.commands" for p in root.glob("*/commands.py")}
    imported = {m.__name__ for m in vars(main).values() if isinstance(m, ModuleType)}
    assert modules <= imported
    source = inspect.getsource(main.register_commands)
    for name in modules:
        alias = f"{name.split('.')[1]}_commands.register"
        assert alias in source, name


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
