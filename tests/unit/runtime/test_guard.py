"""Any exception while handling one record makes that record a dead letter; outages do not."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from kafka.errors import KafkaTimeoutError
from sqlalchemy.exc import OperationalError

from tests.unit.fakes import RecordedDeadLetters

EVENT = SimpleNamespace(message=SimpleNamespace(topic="t", partition=0, offset=7))


def run(handler) -> RecordedDeadLetters:  # type: ignore[no-untyped-def]
    letters = RecordedDeadLetters()
    asyncio.run(letters.guard(EVENT, handler))  # type: ignore[arg-type]
    return letters


def test_an_exception_in_the_handler_becomes_a_dead_letter_with_its_reason() -> None:
    async def explode(event: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    letters = run(explode)
    assert len(letters.sent) == 1
    event, rejection = letters.sent[0]
    assert event is EVENT
    assert rejection.reason == "processing_error"
    assert rejection.detail.startswith("RecursionError: maximum recursion depth")


def test_a_handled_record_sends_nothing() -> None:
    async def fine(event: object) -> None:
        return None

    assert run(fine).sent == []


@pytest.mark.parametrize(
    "exc",
    [
        KafkaTimeoutError("broker down"),
        OperationalError("select 1", {}, Exception("database is locked")),
        ConnectionRefusedError("refused"),
    ],
)
def test_an_outage_is_not_the_records_fault_and_propagates(exc: Exception) -> None:
    async def outage(event: object) -> None:
        raise exc

    with pytest.raises(type(exc)):
        run(outage)
