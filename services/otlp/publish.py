"""Publishing mapped traces through the producer SDK (services/replay/producer.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from services.otlp.mapping import Taken
from services.replay.producer import TrafficProducer


def _acked(future: Any) -> asyncio.Future[None]:
    """A kafka-python future as an asyncio one (its callbacks run on the sender thread)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def ok(_metadata: Any) -> None:
        loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

    def failed(exc: BaseException) -> None:
        loop.call_soon_threadsafe(lambda: done.done() or done.set_exception(exc))

    future.add_callback(ok)
    future.add_errback(failed)
    return done


class KafkaPublisher:
    """Sends a trial's events and returns once the broker acknowledged them all."""

    def __init__(self, producer: TrafficProducer, timeout_s: float) -> None:
        self.producer = producer
        self.timeout_s = timeout_s

    async def publish(self, taken: Taken) -> None:
        events = [taken.conversation] + ([taken.session] if taken.session else [])
        # send() may block on metadata while the broker is away: off the event loop.
        futures = [await asyncio.to_thread(self.producer.send, e) for e in events]
        await asyncio.wait_for(asyncio.gather(*map(_acked, futures)), self.timeout_s)
