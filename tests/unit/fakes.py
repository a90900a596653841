"""Fakes of the runtime's ports for unit tests of a processor's steps."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from services.contract.codec import Rejection
from services.contract.settings import Settings
from services.otlp.settings import OtlpSettings
from services.runtime.app import DeadLetters

# Every environment variable the settings read.
SETTING_VARIABLES = tuple(
    field.alias
    for model in (Settings, OtlpSettings)
    for field in model.model_fields.values()
    if field.alias
)


@contextmanager
def without_setting_variables() -> Iterator[None]:
    """The environment, for a moment, without any variable the settings read."""
    saved = {name: os.environ.pop(name) for name in SETTING_VARIABLES if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def default_settings(**values: Any) -> Settings:
    """The settings' defaults and `values` (by their environment names), whatever a
    developer's or CI's environment says: for settings made when a test module is
    imported, before tests/unit/conftest.py clears the environment for each test."""
    with without_setting_variables():
        return Settings(**values)


class RecordedDeadLetters(DeadLetters):
    """The real guard, with the dead letters recorded instead of sent."""

    def __init__(self, processor: str = "gate", settings: Settings | None = None) -> None:
        self.processor = processor
        self.settings = settings or default_settings()
        self.sent: list[tuple[Any, Rejection]] = []

    async def __call__(self, event, rejection):  # type: ignore[no-untyped-def, override]
        self.sent.append((event, rejection))

    def reasons(self) -> list[str]:
        return [rejection.reason for _, rejection in self.sent]
