"""Unit tests compute from the settings' defaults and what each test sets itself: a
developer's or CI's environment (PASSK_*, KAFKA_*, OPENAI_*) must not change a result."""

from __future__ import annotations

import pytest

from tests.unit.fakes import SETTING_VARIABLES


@pytest.fixture(autouse=True)
def _settings_from_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SETTING_VARIABLES:
        monkeypatch.delenv(name, raising=False)
