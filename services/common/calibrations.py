"""Every judge calibration a worker has read from `judge-calibrations.v1`, kept current.

The verdict processor decides at verdict time whether each judge verdict gates; it reads
the calibrations with its own group-less consumer (all partitions, nothing committed), as
the scenario catalog reads scenarios. `sync(arrived_at)` makes a decision see every
calibration published before the input that triggered it arrived: unless a sync already
started after that moment, it fetches the topic's end offsets and waits until the
follower has read up to them. So `passk calibrate` followed by traffic is never graded on
a stale policy, and a worker working through a backlog (whose inputs all arrived before
its last sync) asks the broker nothing more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from schemas.events import JudgeCalibration
from services.common.calibration import CalibrationBook
from services.common.codec import Rejection, decode
from services.common.kafka_client import kafka_client_kwargs
from services.common.settings import Settings, get_settings
from services.common.topics import Topic, topic_name

log = logging.getLogger(__name__)


class CalibrationFollower:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self.topic = topic_name(Topic.JUDGE_CALIBRATIONS, self.settings)
        self.book = CalibrationBook()
        self._consumer: AIOKafkaConsumer | None = None
        self._follower: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._sync_started = 0.0  # wall clock when the end offsets last synced to were asked
        self._target: dict[TopicPartition, int] = {}

    async def ready(self, timeout: float = 60.0) -> None:
        async with self._lock:
            if self._consumer is not None:
                return
            consumer = AIOKafkaConsumer(
                self.topic,
                **kafka_client_kwargs(self.settings),
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
            )
            try:
                async with asyncio.timeout(timeout):
                    await consumer.start()
                    self._consumer = consumer
                    await self._sync_now()
            except BaseException:
                self._consumer = None
                await consumer.stop()
                raise
            self._follower = asyncio.create_task(self._follow(), name="calibrations")

    async def _follow(self) -> None:
        assert self._consumer is not None
        while True:
            try:
                self._apply(await self._consumer.getmany(timeout_ms=1000))
            except asyncio.CancelledError:
                raise
            except Exception:  # the broker hiccups; the book keeps what it has
                log.exception("calibrations: reading %s failed; retrying", self.topic)
                await asyncio.sleep(1.0)

    def _apply(self, batch: dict[Any, list[Any]]) -> None:
        for records in batch.values():
            for record in records:
                calibration = decode(record.value, JudgeCalibration)
                if isinstance(calibration, Rejection):
                    log.warning("calibrations: skipping %s@%d: %s", record.topic,
                                record.offset, calibration.detail)
                    continue
                self.book.apply(calibration)

    async def _sync_now(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        partitions = consumer.assignment()
        if not partitions:
            # A group-less subscription is assigned lazily; wait for it.
            deadline = time.monotonic() + 30
            while not partitions and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                partitions = consumer.assignment()
        started = time.time()
        self._target = dict(await consumer.end_offsets(list(partitions))) if partitions else {}
        while True:
            behind = [tp for tp, end in self._target.items()
                      if await consumer.position(tp) < end]
            if not behind:
                self._sync_started = started
                return
            if self._follower is None:  # catching up before the follower runs
                self._apply(await consumer.getmany(*behind, timeout_ms=500))
            else:
                await asyncio.sleep(0.05)

    async def sync(self, arrived_at: float | None = None, timeout: float = 10.0) -> None:
        """See every calibration published before `arrived_at` (epoch seconds; default:
        now). On a broker that does not answer within `timeout`, go on with what has been
        read (and say so)."""
        if self._consumer is None:
            await self.ready()
            return
        target = time.time() if arrived_at is None else arrived_at
        if self._sync_started >= target:
            return
        try:
            async with self._lock, asyncio.timeout(timeout):
                if self._sync_started < target:
                    await self._sync_now()
        except (TimeoutError, KafkaError, OSError) as exc:
            log.warning("calibrations: could not sync with %s (%s); using what was read",
                        self.topic, exc)

    async def stop(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            try:
                await self._follower
            except asyncio.CancelledError:
                pass
            self._follower = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
