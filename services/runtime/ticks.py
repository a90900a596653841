"""Deadlines for keyed state in a Faust table.

Faust writes a table's changelog to the partition of the event being processed, so
state may only change inside the agent's stream. A timer therefore does not expire
state itself: it sends a tick, keyed like the state, to a topic the agent reads, and
the agent re-examines that key in order with its other events.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

import faust
from faust.types import TP

from services.contract.eventtime import bounded
from services.contract.settings import Settings
from services.kafka.kafka_client import kafka_client_kwargs
from services.runtime.faust_compat import awaiting_seek, current_event, on_recovery_completed
from services.runtime.outage import BROKER, Dependency

PROBE_INTERVAL_S = 5.0


# A table of keyed state: each key's `table_value`.
StateTable: TypeAlias = faust.types.TableT[str, dict[str, Any]]


def table_value(state: dict[str, Any], due_at: float | None) -> dict[str, Any]:
    """What the table holds per key: the state and when it next needs a look."""
    return {"state": state, "due_at": due_at}


class DeadlineTicker:
    """The keys that need a look, ordered by when: a tick costs what is due, not what the
    table holds.

    The processor tells it each key's next due time whenever it stores the key's state
    (`schedule`); a heap keeps them in order and an entry whose key was rescheduled or
    forgotten since is skipped when it surfaces (lazy deletion, O(log n) per change).
    A key ticked is scheduled again `again_after_s` later, so a tick lost in a crash, or
    one that found its partition's stream clock still behind, is followed by another.

    After a rebalance the table holds keys restored from its changelog that were never
    scheduled here: `reseed` marks the heap stale and the next tick brings it in line with
    one pass over the table (once per rebalance, not once per tick).
    """

    def __init__(
        self,
        table: StateTable,
        ticks: faust.TopicT,
        again_after_s: float = 10.0,
        stream_now: Callable[[int], float] | None = None,
    ):
        self.table = table
        self.ticks = ticks
        self.again_after_s = again_after_s
        # The stream time of a partition: a key whose partition has not been read up to
        # its due time is not ticked (the tick would find nothing due). Without this, a
        # worker deep in a backlog ticked every pending key every `again_after_s` and the
        # ticks crowded out the work (a 50,000-trial replay stalled the verdict).
        self.stream_now = stream_now
        self._heap: list[tuple[float, str]] = []
        self._due: dict[str, float] = {}  # key -> the due time its live heap entry has
        self._partition: dict[str, int] = {}  # key -> the partition it was stored from
        self._held: dict[str, float] = {}  # key -> its due time, while its partition is behind
        self._stale = True

    def schedule(self, key: str, due_at: float | None) -> None:
        self._held.pop(key, None)
        if due_at is None:
            self._due.pop(key, None)
            self._partition.pop(key, None)
            return
        event = current_event()
        if event is not None:
            self._partition[key] = event.message.partition
        if self._due.get(key) == due_at:
            return
        self._due[key] = due_at
        heapq.heappush(self._heap, (due_at, key))
        if len(self._heap) > 2 * len(self._due) + 1024:
            self._compact()

    def reseed(self) -> None:
        self._stale = True

    def pending(self) -> int:
        return len(self._due)

    def due(self, now: float) -> list[str]:
        """Pop the keys due at `now`, each rescheduled `again_after_s` later."""
        if self._stale:
            self._seed()
        out: list[str] = []
        later: list[tuple[str, float]] = []
        while self._heap and self._heap[0][0] <= now:
            due_at, key = heapq.heappop(self._heap)
            if self._due.get(key) != due_at:
                continue  # rescheduled or forgotten since this entry was pushed
            partition = self._partition.get(key)
            really_due = self._held.get(key, due_at)
            if (
                self.stream_now is not None
                and partition is not None
                and self.stream_now(partition) < really_due
            ):
                later.append((key, really_due))  # its partition is behind: no tick yet
            else:
                out.append(key)
        for key in out:
            self.schedule(key, now + self.again_after_s)
        for key, really_due in later:
            self.schedule(key, now + self.again_after_s)
            self._held[key] = really_due
        return out

    async def tick_due(self, now: float) -> int:
        keys = self.due(now)
        for key in keys:
            await self.ticks.send(key=key.encode(), value=json.dumps({"tick_at": now}).encode())
        return len(keys)

    def _seed(self) -> None:
        """Schedule what the table holds and was never scheduled; drop what it no longer
        holds (a revoked partition's keys, ticked by their new owner now)."""
        self._stale = False
        held: dict[str, float | None] = {
            key: (value.get("due_at") if value else None) for key, value in self.table.items()
        }
        for key in [k for k in self._due if k not in held]:
            del self._due[key]
            self._partition.pop(key, None)
            self._held.pop(key, None)
        for key, due_at in held.items():
            if key not in self._due:
                self.schedule(key, due_at)
        self._compact()

    def _compact(self) -> None:
        self._heap = [(due, key) for key, due in self._due.items()]
        heapq.heapify(self._heap)


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

    def __init__(
        self,
        highwater: Callable[[str, int], int | None],
        wall: Callable[[], float] = time.time,
        awaiting_seek: Callable[[str, int], bool] = lambda t, p: False,
        trusted_for_s: float = 2 * PROBE_INTERVAL_S,
        max_skew_s: float = 300.0,
    ) -> None:
        self._highwater = highwater
        # A record's timestamp is the broker's (LogAppendTime), but a topic made by hand
        # may carry the producer's: a record dated 2099 must not fire every deadline.
        self._max_skew_s = max_skew_s
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
        seen = bounded(timestamp or 0.0, self._wall(), self._max_skew_s)
        self._read[(topic, partition)] = (offset, max(newest, seen))

    def set_committed(self, committed: dict[tuple[str, int], int], at: float | None = None) -> None:
        """The group's committed offsets, read from the broker at wall time `at`."""
        self._committed = committed
        self._broker_seen_at = at if at is not None else self._wall()

    def caught_up(self, topic: str, partition: int) -> bool:
        """Whether every record of the partition written so far (as of the last fetch's
        high-water mark) has been processed."""
        last_offset, _ = self._read.get((topic, partition), (-1, 0.0))
        try:
            highwater = self._highwater(topic, partition)
        except Exception:  # not assigned, or no fetch yet: nothing proves we are caught up
            highwater = None
        if highwater is None:
            return False
        done = (
            last_offset + 1
            if last_offset >= 0
            else self._committed.get((topic, partition), 0 if highwater == 0 else -1)
        )
        return done >= highwater

    def now(self, topic: str, partition: int) -> float:
        if self.caught_up(topic, partition):
            wall = self._wall()
            if self._broker_seen_at is None:
                return wall
            return min(wall, self._broker_seen_at + self._trusted_for_s)
        return self._read.get((topic, partition), (-1, 0.0))[1]

    def now_for(self, topics: Iterable[str], partition: int) -> float:
        """The slowest of several co-partitioned inputs."""
        return min(self.now(topic, partition) for topic in topics)


def faust_highwater(app: faust.App) -> Callable[[str, int], int | None]:
    def highwater(topic: str, partition: int) -> int | None:
        return app.consumer.highwater(TP(topic, partition))

    return highwater


def faust_awaiting_seek(app: faust.App) -> Callable[[str, int], bool]:
    def awaiting(topic: str, partition: int) -> bool:
        return awaiting_seek(app.consumer, TP(topic, partition))

    return awaiting


class CommittedOffsets:
    """A group's committed offsets, read with one long-lived kafka-python admin client
    (opening a client per read costs a connection and a metadata round trip each time).
    Call `read` off the event loop; a failed read drops the client so the next one
    reconnects."""

    def __init__(self, settings: Settings, group: str) -> None:
        self.settings = settings
        self.group = group
        self._admin: Any = None

    def read(self) -> dict[tuple[str, int], int]:
        from kafka import KafkaAdminClient

        if self._admin is None:
            # Bounded waits: a read during a broker outage fails in seconds, not kafka-python's 30.
            self._admin = KafkaAdminClient(
                **kafka_client_kwargs(self.settings),
                request_timeout_ms=10_000,
                bootstrap_timeout_ms=5_000,
            )
        try:
            offsets = self._admin.list_group_offsets({self.group: None}).get(self.group) or {}
        except Exception:
            self.close()
            raise
        return {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()}

    def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            admin.close()


def committed_offsets(settings: Settings, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, with a client of its own (for one-off reads)."""
    reader = CommittedOffsets(settings, group)
    try:
        return reader.read()
    finally:
        reader.close()


class Deadlines:
    """Keyed deadlines for a processor: a timer ticks every due key onto the processor's
    own tick topic, and a stream clock tells the agent what time it is on a partition.
    The processor calls `schedule(key, due_at)` whenever it stores a key's state."""

    def __init__(
        self,
        app: faust.App,
        table: StateTable,
        ticks: faust.TopicT,
        settings: Settings,
        inputs: tuple[str, ...] = (),
    ) -> None:
        """`inputs`: the topics whose stream clock the deadlines run on (no tick is sent
        for a key until its partition of them has been read up to its due time)."""
        self.clock = StreamClock(
            faust_highwater(app),
            awaiting_seek=faust_awaiting_seek(app),
            max_skew_s=settings.max_clock_skew_s,
        )
        self.ticker = DeadlineTicker(
            table, ticks, stream_now=(lambda p: self.clock.now_for(inputs, p)) if inputs else None
        )
        self.committed = CommittedOffsets(settings, app.conf.id)
        self.schedule = self.ticker.schedule
        # A timer that raises crashes the whole Faust app: each one survives a broker
        # outage by counting it, backing off, and trying again (see outage.Dependency).
        self.ticking = Dependency(BROKER, f"{app.conf.id}: sending deadline ticks")
        self.probing = Dependency(BROKER, f"{app.conf.id}: reading offsets", max_backoff_s=10.0)

        # Keys restored from the changelog after a rebalance were never scheduled here.
        on_recovery_completed(table, "deadlines", self.ticker.reseed)

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
                offsets = await asyncio.to_thread(self.committed.read)
            except Exception as exc:
                self.probing.failed("read_offsets", exc)
                return
            self.probing.succeeded()
            self.clock.set_committed(offsets, at)

        @app.on_before_shutdown.connect  # type: ignore[arg-type]  # stub wants a signal kwarg
        async def close_admin(sender: faust.App, **_: object) -> None:
            await asyncio.to_thread(self.committed.close)
