"""Patch 10 (faust_compat/delivery.py): every worker's producer is idempotent, and once a
record was not delivered it sends nothing more and the flush Faust runs before every
offset commit raises, every time. Driven through the real faust aiokafka driver's
`Producer` of a real (unstarted) app; where a client is needed only the aiokafka client
under it is replaced, by one whose deliveries the test settles. The assumptions about
aiokafka's idempotent producer are checked on aiokafka's own classes."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    NotLeaderForPartitionError,
    RequestTimedOutError,
)
from aiokafka.producer.message_accumulator import MessageAccumulator
from aiokafka.producer.sender import SendProduceReqHandler
from aiokafka.structs import TopicPartition
from faust.exceptions import ProducerSendError

from services.runtime import faust_compat
from services.runtime.faust_compat.delivery import ProducerFenced, first_failure

faust_compat.apply()  # the fix under test (what make_app does)


class Client:
    """An aiokafka producer as the driver uses it: `send` returns the record's delivery."""

    def __init__(self) -> None:
        self.deliveries: list[asyncio.Future[Any]] = []
        self.sent: list[bytes | None] = []
        self.refuse: BaseException | None = None

    async def send(self, topic: str, value: bytes | None, **kwargs: Any) -> asyncio.Future[Any]:
        if self.refuse is not None:
            raise self.refuse
        delivery = asyncio.get_running_loop().create_future()
        self.deliveries.append(delivery)
        self.sent.append(value)
        return delivery

    async def flush(self) -> None:
        await asyncio.gather(*self.deliveries, return_exceptions=True)


def new_app(name: str = "passk-test-delivery", **conf: Any) -> faust.App:
    return faust.App(name, broker="kafka://127.0.0.1:1", producer_acks=-1, **conf)


@pytest.fixture
def producer() -> Any:
    producer = new_app().producer
    producer._producer = client = Client()
    producer.client = client
    return producer


async def send(producer: Any, n: int) -> Any:
    return await producer.send("t", None, f"record {n}".encode(), None, None, None)


# --- the producer faust builds is idempotent ----------------------------------------------


async def test_every_workers_producer_is_built_idempotent() -> None:
    app = new_app(producer_request_timeout=3.0)
    made = app.producer._new_producer()
    try:
        assert made._txn_manager is not None  # aiokafka's idempotence: sequence numbers
        assert made._txn_manager.transactional_id is None  # not a transaction
        assert made.client._request_timeout_ms == 3000  # the timeout is still the setting's
    finally:
        await made.client.close()


async def test_unpatched_faust_builds_it_idempotent_only_in_its_exactly_once_mode() -> None:
    unpatched = faust.transport.drivers.aiokafka.Producer._settings_extra.__wrapped__
    assert unpatched(new_app().producer) == {}
    eos = new_app("passk-test-eos", processing_guarantee="exactly_once")
    eos.in_worker = True
    assert unpatched(eos.producer) == {"acks": "all", "enable_idempotence": True}


# --- what the patch rests on in aiokafka --------------------------------------------------


def expired_batch(ttl: float) -> Any:
    accumulator = MessageAccumulator(
        cluster=None,
        batch_size=16384,
        compression_type=0,
        batch_ttl=ttl,
        txn_manager=None,
        loop=asyncio.get_running_loop(),
    )
    tp = TopicPartition("t", 0)
    batch = accumulator._append_batch(accumulator.create_builder(), tp)
    batch._ctime -= 10 * ttl  # long past the producer's timeout
    return batch


@pytest.mark.parametrize(
    "error", [KafkaConnectionError(), RequestTimedOutError(), NotLeaderForPartitionError()]
)
async def test_aiokafka_retries_an_idempotent_batch_past_the_timeout_and_expires_others(
    error: Exception,
) -> None:
    """A broker gone past the timeout: an idempotent producer's batch is retried (under
    the same sequence number, so the broker keeps it once and in order); a plain
    producer's is failed, and the batches after it still go."""
    batch = expired_batch(3.0)
    assert batch.expired()

    def can_retry(idempotent: bool) -> bool:
        sender: Any = type(
            "Sender",
            (),
            {
                "_retry_backoff": 0.1,
                "client": None,
                "_txn_manager": object() if idempotent else None,
            },
        )()
        handler = SendProduceReqHandler(sender, {batch.tp: batch})
        return bool(handler._can_retry(error, batch))

    assert can_retry(idempotent=True)
    assert not can_retry(idempotent=False)


# --- no send and no commit after a failure ------------------------------------------------


async def test_a_flush_with_every_record_delivered_returns(producer: Any) -> None:
    for n in range(3):
        await send(producer, n)
    for delivery in producer._producer.deliveries:
        delivery.set_result(None)
    await producer.flush()  # does not raise
    await producer.flush()  # nor again
    await send(producer, 3)  # and sending goes on
    assert first_failure(producer) is None


async def test_a_record_the_producer_gave_up_on_stops_every_later_commit(producer: Any) -> None:
    for n in range(3):
        await send(producer, n)
    first, lost, last = producer._producer.deliveries
    first.set_result(None)
    lost.set_exception(KafkaTimeoutError("Batch expired"))  # an outage past the timeout
    last.set_result(None)
    for _ in range(2):  # not told once and then forgotten: the worker must not commit
        with pytest.raises(ProducerFenced, match=r"not committing.*Batch expired"):
            await producer.flush()


async def test_nothing_is_sent_after_a_record_was_lost(producer: Any) -> None:
    """A later write must not land after a hole: the failure is seen as it happens (the
    delivery's callback), before any later send."""
    await send(producer, 0)
    (lost,) = producer._producer.deliveries
    lost.set_exception(KafkaTimeoutError("Batch expired"))
    await asyncio.sleep(0)  # the delivery's callbacks run
    with pytest.raises(ProducerSendError, match="not sending"):
        await send(producer, 1)
    assert producer._producer.sent == [b"record 0"]


async def test_a_send_that_raised_stops_every_later_send_and_commit(producer: Any) -> None:
    """A record refused before it got a sequence number (no room in the buffer within the
    timeout) leaves no gap the broker could see: the next record must not go either."""
    producer._producer.refuse = KafkaTimeoutError("no room for the record")
    with pytest.raises(ProducerSendError):  # the caller sees it (faust wraps KafkaError)
        await send(producer, 0)
    producer._producer.refuse = None  # the broker is back
    with pytest.raises(ProducerFenced, match="not sending.*no room for the record"):
        await send(producer, 1)
    assert producer._producer.sent == []
    with pytest.raises(ProducerFenced, match="not committing.*no room for the record"):
        await producer.flush()


async def test_a_cancelled_send_is_not_a_failure(producer: Any) -> None:
    producer._producer.refuse = asyncio.CancelledError()
    with pytest.raises(asyncio.CancelledError):
        await send(producer, 0)
    producer._producer.refuse = None
    await send(producer, 1)
    producer._producer.deliveries[0].cancel()
    await asyncio.sleep(0)
    await producer.flush()
    assert first_failure(producer) is None
