"""docs/configuration.md against the code: every setting of every settings model under
services/ has its line, and every variable the page documents is read by something (a
setting, or a script under infra/ or the Makefile). A setting added without its line, or
a line left behind by a setting removed, fails here."""

from __future__ import annotations

import importlib
import re

from pydantic_settings import BaseSettings

from services.contract.ports import DEFAULT_PORTS
from tests.support import ROOT

DOC = (ROOT / "docs" / "configuration.md").read_text()
VARIABLE = re.compile(r"`((?:PASSK|KAFKA|OPENAI)_[A-Z0-9_]+)`")


def settings_models() -> list[type[BaseSettings]]:
    """Every settings model under services/ (the modules that name BaseSettings)."""
    found = []
    for path in sorted((ROOT / "services").rglob("*.py")):
        if "BaseSettings" not in path.read_text():
            continue
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseSettings)
                and value.__module__ == module.__name__
            ):
                found.append(value)
    return found


def settings_aliases() -> set[str]:
    return {f.alias for model in settings_models() for f in model.model_fields.values() if f.alias}


def test_there_are_settings_models_to_check() -> None:
    names = {m.__name__ for m in settings_models()}
    assert {"Settings", "OtlpSettings"} <= names


def test_every_setting_is_documented() -> None:
    documented = set(VARIABLE.findall(DOC))
    missing = settings_aliases() - documented
    assert not missing, f"settings missing from docs/configuration.md: {sorted(missing)}"


def test_every_documented_variable_is_read_by_something() -> None:
    scripts = "".join(
        p.read_text(errors="replace")
        for p in (ROOT / "infra").rglob("*")
        if p.is_file() and p.suffix in (".sh", ".py", ".yml", ".yaml")
    )
    scripts += (ROOT / "Makefile").read_text()
    known = settings_aliases() | set(DEFAULT_PORTS)
    unread = {v for v in VARIABLE.findall(DOC) if v not in known and v not in scripts}
    assert not unread, f"documented but read by nothing: {sorted(unread)}"
