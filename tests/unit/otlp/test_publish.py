"""The publisher resumes by itself after a broker outage: a failed producer is replaced."""

from __future__ import annotations

import pytest
from kafka.future import Future

from services.otlp.mapping import Taken, assemble, by_trace, spans_of
from services.otlp.publish import KafkaPublisher
from tests.unit.otlp.spans import agent_trace, request


class FakeProducer:
    def __init__(self, down: bool) -> None:
        self.down, self.sent, self.closed = down, [], False

    def send(self, event):  # type: ignore[no-untyped-def]
        if self.down:
            return Future().failure(ConnectionError("broker down"))
        self.sent.append(event.event_id)
        return Future().success(None)

    def close(self, timeout=None) -> None:  # type: ignore[no-untyped-def]
        self.closed = True


def _taken() -> Taken:
    result = assemble(next(iter(by_trace(spans_of(request(*agent_trace()))).values())))
    assert isinstance(result, Taken)
    return result


async def test_a_failed_producer_is_replaced_and_the_retry_goes_through() -> None:
    made: list[FakeProducer] = []

    def make() -> FakeProducer:
        made.append(FakeProducer(down=not made))
        return made[-1]

    publisher = KafkaPublisher(make, timeout_s=5)  # type: ignore[arg-type]
    with pytest.raises(ConnectionError):
        await publisher.publish(_taken())
    await publisher.publish(_taken())
    assert len(made) == 2 and made[1].sent == [f"otel:{1:032x}:conversation"]
