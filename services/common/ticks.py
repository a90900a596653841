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

    Caught up on a partition, its time is the wall clock. Behind (say, just restarted with
    a backlog), its time is the newest broker timestamp read from it so far. A deadline on
    a key therefore fires only once everything written to its partitions before the
    deadline has been read: a worker that was down does not fail trials whose answer is
    sitting in its backlog.

    Caught up means: the last offset this worker processed is the last one written; or,
    on a partition it has read nothing from since it started, that the group's committed
    offset has reached the end (everything there was processed before the restart).

    Both are only as fresh as the last answer from the broker. While it does not answer
    (an outage), the wall clock is not trusted past the last successful offset read plus
    one interval: time stands still instead of running out on records the worker cannot
    fetch. Records delivered while their partition still awaits the seek of a rebalance
    were fetched before it and are read again in order: they are not counted as read.
    """

    def __init__(self, highwater: Callable[[str, int], int | None],
                 wall: Callable[[], float] = time.time,
                 awaiting_seek: Callable[[str, int], bool] = lambda t, p: False,
                 trusted_for_s: float = 2 * PROBE_INTERVAL_S) -> None:
        self._highwater = highwater
        self._wall = wall
        self._awaiting_seek = awaiting_seek
        self._trusted_for_s = trusted_for_s
        self._read: dict[tuple[str, int], tuple[int, float]] = {}  # last offset, newest ts
        self._committed: dict[tuple[str, int], int] = {}
        self._broker_seen_at: float | None = None

    def observe(self, topic: str, partition: int, offset: int, timestamp: float | None) -> None:
        if self._awaiting_seek(topic, partition):
            return
        _, newest = self._read.get((topic, partition), (-1, 0.0))
        self._read[(topic, partition)] = (offset, max(newest, timestamp or 0.0))

    def set_committed(self, committed: dict[tuple[str, int], int], at: float | None = None) -> None:
        """The group's committed offsets, read from the broker at wall time `at`."""
        self._committed = committed
        self._broker_seen_at = at if at is not None else self._wall()

    def now(self, topic: str, partition: int) -> float:
        last_offset, newest = self._read.get((topic, partition), (-1, 0.0))
        try:
            highwater = self._highwater(topic, partition)
        except Exception:  # not assigned, or no fetch yet: nothing proves we are caught up
            highwater = None
        if highwater is not None:
            done = last_offset + 1 if last_offset >= 0 else self._committed.get(
                (topic, partition), 0 if highwater == 0 else -1)
            if done >= highwater:
                wall = self._wall()
                if self._broker_seen_at is None:
                    return wall
                return min(wall, self._broker_seen_at + self._trusted_for_s)
        return newest

    def now_for(self, topics: Iterable[str], partition: int) -> float:
        """The slowest of several co-partitioned inputs."""
        return min(self.now(topic, partition) for topic in topics)


def faust_highwater(app: faust.App) -> Callable[[str, int], int | None]:
    def highwater(topic: str, partition: int) -> int | None:
        return app.consumer.highwater(TP(topic, partition))  # type: ignore[no-any-return]

    return highwater


def faust_awaiting_seek(app: faust.App) -> Callable[[str, int], bool]:
    def awaiting(topic: str, partition: int) -> bool:
        offsets = getattr(app.consumer, "_read_offset", None)
        return isinstance(offsets, SeekGuardedReadOffsets) and offsets.pending(TP(topic, partition))

    return awaiting


def committed_offsets(settings: Settings, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, read with kafka-python (call it off the event loop).
    Raises when the broker does not answer within a few seconds."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers,
                             request_timeout_ms=10_000, bootstrap_timeout_ms=5_000)
    try:
        offsets = admin.list_group_offsets({group: None}).get(group) or {}
        return {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()}
    finally:
        admin.close()


class Deadlines:
    """Keyed deadlines for a processor: a timer ticks every due key onto the processor's
    own tick topic, and a stream clock tells the agent what time it is on a partition."""

    def __init__(self, app: faust.App, table: faust.types.TableT, ticks: faust.TopicT,
                 settings: Settings) -> None:
        self.ticker = DeadlineTicker(table, ticks)
        self.clock = StreamClock(faust_highwater(app), awaiting_seek=faust_awaiting_seek(app))
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
                offsets = await asyncio.to_thread(committed_offsets, settings, app.conf.id)
            except Exception as exc:
                self.probing.failed("read_offsets", exc)
                return
            self.probing.succeeded()
            self.clock.set_committed(offsets, at)
