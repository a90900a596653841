"""Fakes of the runtime's ports for unit tests of a processor's steps."""

from __future__ import annotations

from typing import Any

from services.contract.codec import Rejection
from services.contract.settings import Settings
from services.runtime.app import DeadLetters


class RecordedDeadLetters(DeadLetters):
    """The real guard, with the dead letters recorded instead of sent."""

    def __init__(self, processor: str = "gate", settings: Settings | None = None) -> None:
        self.processor = processor
        self.settings = settings or Settings()
        self.sent: list[tuple[Any, Rejection]] = []

    async def __call__(self, event, rejection):  # type: ignore[no-untyped-def, override]
        self.sent.append((event, rejection))

    def reasons(self) -> list[str]:
        return [rejection.reason for _, rejection in self.sent]
