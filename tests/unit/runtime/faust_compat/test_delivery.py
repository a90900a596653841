"""A record the producer failed to deliver stops the next offset commit: the flush Faust
runs before every commit raises instead of returning. Driven through the real faust
aiokafka driver's `Producer.send` and `Producer.flush` of a real (unstarted) app; only
the aiokafka client under it is replaced, by one whose deliveries the test settles."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from aiokafka.errors import KafkaTimeoutError
from faust.exceptions import ProducerSendError

from services.runtime import faust_compat
from services.runtime.faust_compat.delivery import undelivered

faust_compat.apply()  # the fix under test (what make_app does)


class Client:
    """An aiokafka producer as the driver uses it: `send` returns the record's delivery."""

    def __init__(self) -> None:
        self.deliveries: list[asyncio.Future[Any]] = []
        self.refuse: BaseException | None = None

    async def send(self, topic: str, value: bytes | None, **kwargs: Any) -> asyncio.Future[Any]:
        if self.refuse is not None:
            raise self.refuse
        delivery = asyncio.get_running_loop().create_future()
        self.deliveries.append(delivery)
        return delivery

    async def flush(self) -> None:
        await asyncio.gather(*self.deliveries, return_exceptions=True)


@pytest.fixture
def producer() -> Any:
    app = faust.App("passk-test-delivery", broker="kafka://127.0.0.1:1")
    producer = app.producer
    producer._producer = client = Client()
    producer.client = client
    return producer


async def send(producer: Any, n: int) -> Any:
    return await producer.send("t", None, f"record {n}".encode(), None, None, None)


async def test_a_flush_with_every_record_delivered_returns(producer: Any) -> None:
    for n in range(3):
        await send(producer, n)
    for delivery in producer._producer.deliveries:
        delivery.set_result(None)
    await producer.flush()  # does not raise
    await producer.flush()  # nor again: nothing is left to look at


async def test_a_record_the_producer_gave_up_on_makes_the_flush_raise(producer: Any) -> None:
    for n in range(3):
        await send(producer, n)
    first, lost, last = producer._producer.deliveries
    first.set_result(None)
    lost.set_exception(KafkaTimeoutError("Batch expired"))  # an outage past the timeout
    last.set_result(None)
    with pytest.raises(ProducerSendError, match=r"1 record\(s\) not delivered.*Batch expired"):
        await producer.flush()
    await producer.flush()  # told once: the worker stops on the first


async def test_a_send_that_raised_makes_the_flush_raise(producer: Any) -> None:
    producer._producer.refuse = KafkaTimeoutError("no room for the record")
    with pytest.raises(ProducerSendError):  # the caller sees it (faust wraps KafkaError)
        await send(producer, 0)
    producer._producer.refuse = None
    with pytest.raises(ProducerSendError, match="no room for the record"):
        await producer.flush()


async def test_a_record_still_pending_is_looked_at_by_the_next_flush(producer: Any) -> None:
    await send(producer, 0)
    (pending,) = producer._producer.deliveries
    # Sent during a flush (for an event that commit does not cover): not settled yet.
    assert undelivered(producer) == []
    pending.set_exception(KafkaTimeoutError("Batch expired"))
    assert [type(e) for e in undelivered(producer)] == [KafkaTimeoutError]
    assert undelivered(producer) == []
