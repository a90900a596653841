"""Every judge calibration a worker has read from `judge-calibrations.v1`, kept current.

The verdict processor decides at verdict time whether each judge verdict gates; it reads
the calibrations with a topic follower, as the scenario catalog reads scenarios.
`sync(arrived_at)` makes a decision see every calibration published before the input
that triggered it arrived: unless a sync already started after that moment, it fetches
the topic's end offsets and waits until the follower has read up to them. So
`passk calibrate` followed by traffic is never graded on a stale policy, and a worker
working through a backlog (whose inputs all arrived before its last sync) asks the
broker nothing more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka.errors import KafkaError

from schemas.events import JudgeCalibration
from services.contract.codec import Rejection, decode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.grading.calibration import CalibrationBook
from services.kafka.follower import TopicFollower

log = logging.getLogger(__name__)


class CalibrationFollower(TopicFollower):
    def __init__(self, settings: Settings) -> None:
        super().__init__(
            topic_name(Topic.JUDGE_CALIBRATIONS, settings), settings, label="calibrations"
        )
        self.book = CalibrationBook()
        self._sync_started = 0.0  # wall clock when the end offsets last synced to were asked

    def on_record(self, record: Any) -> None:
        calibration = decode(record.value, JudgeCalibration)
        if isinstance(calibration, Rejection):
            log.warning(
                "calibrations: skipping %s@%d: %s", record.topic, record.offset, calibration.detail
            )
            return
        self.book.apply(calibration)

    async def ready(self, timeout: float = 60.0) -> None:
        async with self._lock:
            if not self.started:
                started = time.time()
                await self._start(timeout)
                self._sync_started = started

    async def sync(self, arrived_at: float | None = None, timeout: float = 10.0) -> None:
        """See every calibration published before `arrived_at` (epoch seconds; default:
        now). On a broker that does not answer within `timeout`, go on with what has been
        read (and say so)."""
        if not self.started:
            await self.ready()
            return
        target = time.time() if arrived_at is None else arrived_at
        if self._sync_started >= target:
            return
        try:
            async with self._lock, asyncio.timeout(timeout):
                if self._sync_started < target:
                    started = time.time()
                    await self._catch_up()
                    self._sync_started = started
        except (TimeoutError, KafkaError, OSError) as exc:
            log.warning(
                "calibrations: could not sync with %s (%s); using what was read", self.topic, exc
            )
