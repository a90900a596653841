"""Publishing mapped traces through the producer SDK (services/kafka/producer.py)."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable
from typing import Any

from schemas.events import DeadLetter
from services.contract.codec import encode
from services.kafka.producer import TrafficProducer
from services.otlp.mapping import Taken

log = logging.getLogger("passk.otlp")


def _acked(future: Any) -> asyncio.Future[None]:
    """A kafka-python future as an asyncio one (its callbacks run on the sender thread)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is None:
            done.set_result(None)
        else:
            done.set_exception(exc)

    def ok(_metadata: Any) -> None:
        loop.call_soon_threadsafe(settle, None)

    def failed(exc: BaseException) -> None:
        loop.call_soon_threadsafe(settle, exc)

    future.add_callback(ok)
    future.add_errback(failed)
    return done


class KafkaPublisher:
    """Sends a trial's events and returns once the broker acknowledged them all. After a
    failure the producer is replaced: the SDK's producer remembers a topic it could not
    reach and fails fast on it from then on, which suits a CLI run, not a long-lived
    receiver that must resume by itself when the broker is back."""

    def __init__(
        self,
        make_producer: Callable[[], TrafficProducer],
        timeout_s: float,
        dead_letter_topic: str | None = None,
    ) -> None:
        self.make_producer = make_producer
        self.timeout_s = timeout_s
        self.dead_letter_topic = dead_letter_topic
        self.producer: TrafficProducer | None = None

    async def publish_letter(self, letter: DeadLetter) -> None:
        """The dead letter of a trace not taken, keyed by its trace id."""
        if self.dead_letter_topic is None:
            return
        key = base64.b64decode(letter.key_b64) if letter.key_b64 else None
        try:
            if self.producer is None:
                self.producer = await asyncio.to_thread(self.make_producer)
            producer = self.producer
            future = await asyncio.to_thread(
                producer.send_raw, self.dead_letter_topic, key, encode(letter), ref=letter.event_id
            )
            await asyncio.wait_for(_acked(future), self.timeout_s)
        except Exception:
            broken, self.producer = self.producer, None
            if broken is not None:
                asyncio.get_running_loop().run_in_executor(None, broken.close, 0)
            raise

    async def publish(self, taken: Taken) -> None:
        events = [taken.conversation] + ([taken.session] if taken.session else [])
        try:
            if self.producer is None:
                self.producer = await asyncio.to_thread(self.make_producer)
            producer = self.producer
            # send() may block on metadata while the broker is away: off the event loop.
            futures = [await asyncio.to_thread(producer.send, e) for e in events]
            await asyncio.wait_for(asyncio.gather(*map(_acked, futures)), self.timeout_s)
        except Exception:
            broken, self.producer = self.producer, None
            if broken is not None:
                asyncio.get_running_loop().run_in_executor(None, broken.close, 0)
            raise

    async def close(self) -> None:
        if self.producer is not None:
            await asyncio.to_thread(self.producer.close, 10)
