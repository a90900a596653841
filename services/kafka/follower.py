"""Follow one whole topic from a worker: read it to its end at start, then keep reading.

A follower uses its own group-less consumer (all partitions assigned, nothing committed),
so every worker sees every record whatever partitions its Faust consumer group gave it.
The scenario catalog and the calibration book are followers; they say what a record
means (`on_record`) and what to do once a batch has been applied (`on_batch`).
"""

from __future__ import annotations

import abc
import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from services.contract.settings import Settings
from services.kafka.kafka_client import kafka_client_kwargs

log = logging.getLogger(__name__)


class TopicFollower(abc.ABC):
    def __init__(
        self,
        topic: str,
        settings: Settings,
        *,
        label: str,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        self.topic = topic
        self.settings = settings
        self._label = label
        self._isolation_level = isolation_level
        self._consumer: AIOKafkaConsumer | None = None
        # A second client, only for asking end offsets: on the reading consumer's
        # connection that request queues behind its fetch, which an idle topic holds at
        # the broker for fetch_max_wait_ms (500 ms), so every sync took half a second.
        self._offsets: AIOKafkaConsumer | None = None
        self._follower: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @abc.abstractmethod
    def on_record(self, record: Any) -> None:
        """Apply one consumer record."""

    def on_batch(self) -> None:
        """Called after a non-empty batch has been applied; by default nothing to do."""
        return None

    @property
    def started(self) -> bool:
        return self._consumer is not None

    async def _start(self, timeout: float) -> None:
        """Start the consumer, read the topic up to its end offsets as they are now, then
        follow it in a task. Raises what the broker raised (the consumer is stopped)."""

        def client(*topics: str) -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                *topics,
                **kafka_client_kwargs(self.settings),
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                request_timeout_ms=int(min(timeout, 40.0) * 1000),
                isolation_level=self._isolation_level,
            )

        consumer, offsets = client(self.topic), client()
        try:
            async with asyncio.timeout(timeout):
                await consumer.start()
                self._consumer = consumer
                await offsets.start()
                self._offsets = offsets
                await self._catch_up()
        except BaseException:
            self._consumer = self._offsets = None
            await consumer.stop()
            await offsets.stop()
            raise
        self._follower = asyncio.create_task(self._follow(), name=self._label)

    async def _catch_up(self) -> None:
        """Return once every record on the topic at the time of the call has been applied."""
        consumer, offsets = self._consumer, self._offsets
        assert consumer is not None and offsets is not None
        partitions = consumer.assignment()
        while not partitions:  # a group-less subscription is assigned once metadata arrives
            await asyncio.sleep(0.1)
            partitions = consumer.assignment()
        end: dict[TopicPartition, int] = await offsets.end_offsets(list(partitions))
        while True:
            behind = [tp for tp, offset in end.items() if await consumer.position(tp) < offset]
            if not behind:
                return
            if self._follower is None:  # catching up before the follower runs
                self._apply(await consumer.getmany(*behind, timeout_ms=500))
            else:
                await asyncio.sleep(0.05)

    async def _follow(self) -> None:
        assert self._consumer is not None
        while True:
            try:
                self._apply(await self._consumer.getmany(timeout_ms=1000))
            except asyncio.CancelledError:
                raise
            except Exception:  # the broker hiccups; what was read so far stays
                log.exception("%s: reading %s failed; retrying", self._label, self.topic)
                await asyncio.sleep(1.0)

    def _apply(self, batch: dict[Any, list[Any]]) -> None:
        if not any(batch.values()):
            return
        for records in batch.values():
            for record in records:
                self.on_record(record)
        self.on_batch()

    async def stop(self) -> None:
        async with self._lock:
            if self._follower is not None:
                self._follower.cancel()
                try:
                    await self._follower
                except asyncio.CancelledError:
                    pass
                self._follower = None
            for client in (self._consumer, self._offsets):
                if client is not None:
                    await client.stop()
            self._consumer = self._offsets = None
