"""Fixes for faust-streaming 0.15.3's consumer after a seek (installed by `apply`).

When a worker (re)joins with a backlog, a record fetched before Faust seeks its stream
partitions back to the committed offsets can still reach the consumer's drain loop
after the seek. Faust then (1) records the offsets between the seek point and that
stale record as a "gap", which it counts as acknowledged and commits past, and (2) moves
its read offset to the stale record, so the re-fetched records from the seek point on
are dropped as already read. Those records are never processed and never re-read:
trials lose their gate results or sessions (upstream faust-streaming #216, #221, #606).

The fix keeps, per partition, the offset a seek expects next. Until a record at that
offset (or, when the log truly has a hole there, any record after the seek took effect)
has been read, the read offset stays at the seek point and no gap is recorded. A stale
record that slips through is processed early and again in order; every passk processor
drops the repeat. (A topic with a real hole right at a seek point, which passk's inputs
never have, keeps its commit from advancing until offsets are seen to go back.)

Second, Faust's `perform_seek` seeks every partition to its committed offset, awaits
that (one broker round trip per partition, seconds on a busy machine), and only then
records the seek points. After a rebalance it runs while the flow is already active (the
table restore resumed it), so the drain loop reads and processes records from the new
position meanwhile, commits some, and the late bookkeeping then moves the read and
committed offsets back to values already passed: the seek guard waits for a record that
was read before it was set (and the stream clock stops for that partition), and Faust's
commit stays behind the first offset it sees acknowledged after the rewound committed
offset, for good. Seen as a worker that took over a killed worker's partitions and never
drained them (tests/e2e/test_cluster.py; upstream #606 is the same family). The fix reads
the committed offsets first, then seeks each partition and records its seek point in one
step with no await in between, so no record is read between the two; records fetched
before it are the stale ones the guard already handles, and the re-read from the seek
point is dropped downstream as repeats. It is done without copying `perform_seek`: the
consumer's `seek_to_committed` (which only `perform_seek` calls) reads the committed
offsets, then seeks in memory and returns without another await, so Faust's own
`perform_seek` records the seek points in the same step of the event loop.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from faust.transport import consumer as faust_consumer
from faust.types import TP

from services.runtime.faust_compat.patching import Patch


class SeekGuardedReadOffsets(defaultdict):  # type: ignore[type-arg]
    """Faust's `_read_offset` map (TP -> last read offset), aware of pending seeks."""

    def __init__(self) -> None:
        super().__init__(lambda: None)
        self.expected: dict[TP, int] = {}  # TP -> first offset a seek expects
        self.stale_max: dict[TP, int] = {}  # TP -> highest stale offset seen since

    def expect(self, tp: TP, offset: int | None) -> None:
        if offset is None or offset < 0:
            self.expected.pop(tp, None)
            self.stale_max.pop(tp, None)
            super().__setitem__(tp, None)
            return
        self.expected[tp] = offset
        self.stale_max.pop(tp, None)
        super().__setitem__(tp, offset)

    def pending(self, tp: TP) -> bool:
        return tp in self.expected

    def __setitem__(self, tp: TP, offset: Any) -> None:
        expected = self.expected.get(tp)
        if expected is None or offset is None:
            super().__setitem__(tp, offset)
            return
        if offset == expected:
            self._settle(tp, offset)
        elif offset > expected:
            previous = self.stale_max.get(tp)
            if previous is not None and offset <= previous:
                # Offsets went back: the seek took effect and the log has no record at
                # the expected offset (compaction, transaction markers). Resume normally.
                self._settle(tp, offset)
            else:
                self.stale_max[tp] = offset  # read before the seek; keep the seek point
        # offset < expected: cannot happen after a seek; ignore

    def _settle(self, tp: TP, offset: int) -> None:
        self.expected.pop(tp, None)
        self.stale_max.pop(tp, None)
        super().__setitem__(tp, offset)

    def update(self, *args: Any, **kwargs: Any) -> None:
        # Faust's perform_seek sets every stream partition to its committed offset.
        for tp, offset in dict(*args, **kwargs).items():
            self.expect(tp, offset)

    def pop(self, tp: TP, *default: Any) -> Any:
        self.expected.pop(tp, None)
        self.stale_max.pop(tp, None)
        return super().pop(tp, *default)


def _install() -> None:
    """Install the guard on faust's Consumer (the version is checked by the caller)."""
    Consumer = faust_consumer.Consumer
    ThreadDelegate = faust_consumer.ThreadDelegateConsumer
    original_init = Consumer.__init__
    original_add_gap = Consumer._add_gap
    original_seek = Consumer.seek
    original_seek_to_committed = ThreadDelegate.seek_to_committed

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self._read_offset = SeekGuardedReadOffsets()

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        offsets = self._read_offset
        if isinstance(offsets, SeekGuardedReadOffsets) and offsets.pending(tp):
            return  # not a hole in the log: a record read before the seek
        await original_add_gap(self, tp, offset_from, offset_to)

    async def seek(self, partition: TP, offset: int) -> None:
        await original_seek(self, partition, offset)
        offsets = self._read_offset
        if isinstance(offsets, SeekGuardedReadOffsets):
            offsets.expect(faust_consumer.ensure_TP(partition), offset if offset else None)

    async def seek_to_committed(self: Any) -> Mapping[TP, int | None]:
        if not isinstance(self._read_offset, SeekGuardedReadOffsets):
            return await original_seek_to_committed(self)
        committed = await read_committed(self)
        # No await from here until perform_seek has recorded the seek points.
        return seek_now(self, committed)

    Consumer.__init__ = __init__  # type: ignore[method-assign]
    Consumer._add_gap = _add_gap  # type: ignore[method-assign]
    Consumer.seek = seek  # type: ignore[method-assign]
    ThreadDelegate.seek_to_committed = seek_to_committed  # type: ignore[method-assign,assignment]


PATCH = Patch(_install)


async def read_committed(consumer: Any) -> dict[TP, int | None]:
    """The offset each assigned partition resumes from, read in the consumer's thread like
    Faust's seek_to_committed, without seeking: the group's committed offset, or, for a
    partition the group never committed, its first offset (what `earliest`, passk's reset
    policy, starts a new group at). Faust drops the rest of a fetched batch when the
    group's generation changes or the flow stops mid-batch, and relies on this seek to
    read them again; a partition left where the fetcher was lost them for good (a soak:
    the first verdicts written after a broker outage, on partitions the aggregate had
    never committed, were never counted; bench/README.md, "Soak")."""
    client = consumer._thread._ensure_consumer()
    from_start = _resets_to_earliest(consumer)

    async def read() -> dict[TP, int | None]:
        offsets = {tp: await client.committed(tp) for tp in client.assignment()}
        never = [tp for tp, offset in offsets.items() if offset is None or offset < 0]
        if never and from_start:
            offsets.update(await client.beginning_offsets(never))
        return offsets

    return await consumer._thread.call_thread(read)


def _resets_to_earliest(consumer: Any) -> bool:
    conf = getattr(getattr(consumer, "app", None), "conf", None)
    return getattr(conf, "consumer_auto_offset_reset", None) == "earliest"


def seek_in_memory(consumer: Any, tp: TP, offset: int) -> None:
    consumer._thread.seek(tp, offset)  # aiokafka's seek: the fetcher's next position


def seek_now(consumer: Any, committed: dict[TP, int | None]) -> dict[TP, int | None]:
    """Seek each partition still assigned to its committed offset; nothing here awaits,
    so the drain loop reads no record between a seek and the bookkeeping Faust's
    perform_seek does with what this returns (read offset: the seek point or None;
    committed offset: the offset, for those that have one)."""
    assigned = consumer.assignment()
    out: dict[TP, int | None] = {}
    for raw_tp, offset in committed.items():
        tp = faust_consumer.ensure_TP(raw_tp)
        if tp not in assigned:
            continue  # revoked by a rebalance while the offsets were read
        if offset is not None and offset >= 0:
            seek_in_memory(consumer, tp, offset)
            out[tp] = offset
        else:
            out[tp] = None  # nothing committed: read from where the fetcher is
    return out


def awaiting_seek(consumer: Any, tp: TP) -> bool:
    """Whether `tp` still waits for the first record of a seek (records delivered until
    then were fetched before it and are read again)."""
    offsets = getattr(consumer, "_read_offset", None)
    return isinstance(offsets, SeekGuardedReadOffsets) and offsets.pending(tp)
