"""Deadlines for keyed state in a Faust table.

Faust writes a table's changelog to the partition of the event being processed, so
state may only change inside the agent's stream. A timer therefore does not expire
state itself: it sends a tick, keyed like the state, to a topic the agent reads, and
the agent re-examines that key in order with its other events.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import faust
from faust.types import TP

from services.common.faust_fixes import SeekGuardedReadOffsets
from services.common.outage import BROKER, Dependency
from services.common.settings import Settings

PROBE_INTERVAL_S = 5.0


def table_value(state: dict[str, Any], due_at: float | None) -> dict[str, Any]:
    """What the table holds per key: the state and when it next needs a look."""
    return {"state": state, "due_at": due_at}


class DeadlineTicker:
    def __init__(self, table: faust.types.TableT, ticks: faust.TopicT, again_after_s: float = 10.0):
        self.table = table
        self.ticks = ticks
        self.again_after_s = again_after_s
        # A key already ticked is not ticked again for a while, so a backlogged agent is
        # not flooded; if that tick was lost (a crash), the next one follows.
        self._ticked: dict[str, float] = {}

    async def tick_due(self, now: float) -> int:
        sent = 0
        for key, value in list(self.table.items()):
            due = value.get("due_at") if value else None
            if due is None or due > now or now - self._ticked.get(key, 0.0) < self.again_after_s:
                continue
            self._ticked[key] = now
            await self.ticks.send(key=key.encode(), value=json.dumps({"tick_at": now}).encode())
            sent += 1
        for key in [k for k, at in self._ticked.items() if now - at >= self.again_after_s]:
            del self._ticked[key]
        return sent


class StreamClock:
    """The time a deadline is measured on: how far the log has been read, not the wall.

    Every few seconds the worker asks the broker for the end of each input partition
    (a *probe*, stamped with the wall time it was asked at). Once everything up to that
    end has been read, the partition's time is at least the probe's time; behind (just
    restarted with a backlog), it is the newest broker timestamp read so far. A deadline
    on a key therefore fires only once everything written to its partitions before the
    deadline has been read: a worker that was down does not fail trials whose answer is
    sitting in its backlog, and while the broker is unreachable no probe succeeds, so
    time stands still instead of running out on records the worker cannot fetch.

    Read means: the last offset this worker processed; or, on a partition it has read
    nothing from since it started, the group's committed offset (everything before it was
    processed before the restart). Records delivered while their partition still awaits
    the seek of a rebalance were fetched before it and are read again in order: they do
    not count (see faust_fixes).
    """

    KEPT_PROBES = 64

    def __init__(self, awaiting_seek: Callable[[str, int], bool] = lambda t, p: False) -> None:
        self._awaiting_seek = awaiting_seek
        self._read: dict[tuple[str, int], tuple[int, float]] = {}  # last offset, newest ts
        self._committed: dict[tuple[str, int], int] = {}
        self._probes: dict[tuple[str, int], deque[tuple[int, float]]] = {}  # (end, asked at)

    def observe(self, topic: str, partition: int, offset: int, timestamp: float | None) -> None:
        if self._awaiting_seek(topic, partition):
            return
        _, newest = self._read.get((topic, partition), (-1, 0.0))
        self._read[(topic, partition)] = (offset, max(newest, timestamp or 0.0))

    def set_committed(self, committed: dict[tuple[str, int], int]) -> None:
        self._committed = committed

    def probed(self, ends: dict[tuple[str, int], int], at: float) -> None:
        """The broker said at wall time `at` that these partitions end at these offsets."""
        for tp, end in ends.items():
            self._probes.setdefault(tp, deque(maxlen=self.KEPT_PROBES)).append((end, at))

    def now(self, topic: str, partition: int) -> float:
        last_offset, newest = self._read.get((topic, partition), (-1, 0.0))
        done = last_offset + 1 if last_offset >= 0 else self._committed.get((topic, partition), 0)
        for end, at in reversed(self._probes.get((topic, partition), ())):
            if done >= end:  # the newest probe whose end has been read
                return max(newest, at)
        return newest

    def now_for(self, topics: Iterable[str], partition: int) -> float:
        """The slowest of several co-partitioned inputs."""
        return min(self.now(topic, partition) for topic in topics)


def faust_awaiting_seek(app: faust.App) -> Callable[[str, int], bool]:
    def awaiting(topic: str, partition: int) -> bool:
        offsets = getattr(app.consumer, "_read_offset", None)
        return isinstance(offsets, SeekGuardedReadOffsets) and offsets.pending(TP(topic, partition))

    return awaiting


def probe_offsets(settings: Settings, group: str, topics: Iterable[str]
                  ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """(end offsets of the topics' partitions, the group's committed offsets), read with
    kafka-python (call it off the event loop). Raises when the broker does not answer."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    timeouts = {"request_timeout_ms": 10_000, "bootstrap_timeout_ms": 5_000}
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers, **timeouts)
    try:
        offsets = admin.list_group_offsets({group: None}).get(group) or {}
        committed = {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()}
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers, **timeouts)
    try:
        tps = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t) or ()]
        ends = consumer.end_offsets(tps) if tps else {}
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): end for tp, end in ends.items()}, committed


class Deadlines:
    """Keyed deadlines for a processor: a timer ticks every due key onto the processor's
    own tick topic, and a stream clock tells the agent what time it is on a partition."""

    def __init__(self, app: faust.App, table: faust.types.TableT, ticks: faust.TopicT,
                 settings: Settings, inputs: tuple[str, ...]) -> None:
        self.ticker = DeadlineTicker(table, ticks)
        self.clock = StreamClock(faust_awaiting_seek(app))
        # A timer that raises crashes the whole Faust app: each one survives a broker
        # outage by counting it, backing off, and trying again (see outage.Dependency).
        self.ticking = Dependency(BROKER, f"{app.conf.id}: sending deadline ticks")
        self.probing = Dependency(BROKER, f"{app.conf.id}: reading offsets", max_backoff_s=10.0)

        @app.timer(interval=1.0)
        async def tick_due_keys() -> None:
            if not self.ticking.due():
                return
            try:
                await self.ticker.tick_due(time.time())
            except Exception as exc:
                self.ticking.failed("send_tick", exc)
            else:
                self.ticking.succeeded()

        @app.timer(interval=PROBE_INTERVAL_S)
        async def read_committed() -> None:
            if not self.probing.due():
                return
            at = time.time()
            try:
                ends, committed = await asyncio.to_thread(
                    probe_offsets, settings, app.conf.id, inputs)
            except Exception as exc:
                self.probing.failed("read_offsets", exc)
                return
            self.probing.succeeded()
            self.clock.set_committed(committed)
            self.clock.probed(ends, at)
