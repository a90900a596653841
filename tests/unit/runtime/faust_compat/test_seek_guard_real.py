"""The seek guard inside faust-streaming's own consumer: the library's real
`perform_seek`, `seek`, `_drain_messages` and `_add_gap` run; only the network edges
(committed offsets, the in-memory seek, the fetch) are replaced by a scripted sequence
of records."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.types import TP

from services.runtime import faust_compat
from services.runtime.faust_compat import seek_guard

faust_compat.apply()  # what make_app does
T = TP("passk.t.conversation-finished.v1", 3)


# The network edges of the guard's seek_to_committed, per test (set by `consumer` and
# FakeLog): the group's committed offsets, and aiokafka's in-memory seek.
EDGES: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def network_edges(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    async def read_committed(c: Any) -> dict[TP, int | None]:
        return await EDGES["committed"]()  # type: ignore[no-any-return]

    EDGES.update(seek=lambda tp, offset: None)
    monkeypatch.setattr(seek_guard, "read_committed", read_committed)
    monkeypatch.setattr(
        seek_guard, "seek_in_memory", lambda c, tp, offset: EDGES["seek"](tp, offset)
    )
    yield
    EDGES.clear()


def consumer(batches: list[list[int]], committed: int) -> tuple[Any, list[int]]:
    app = faust.App("passk-fix-test", broker="kafka://127.0.0.1:1")
    c: Any = app.consumer
    delivered: list[int] = []
    fetcher = SimpleNamespace(_stopped=asyncio.Event())
    pending = list(batches)

    async def _seek(tp: TP, offset: int) -> None:
        return None

    async def callback(message: Any) -> None:
        delivered.append(message.offset)

    def getmany(timeout: float) -> AsyncIterator[tuple[TP, Any]]:
        async def batch() -> AsyncIterator[tuple[TP, Any]]:
            if not pending:
                fetcher._stopped.set()
                return
            for offset in pending.pop(0):
                yield T, SimpleNamespace(offset=offset, key=b"k", value=b"v", topic=T.topic)

        return batch()

    async def committed_offsets() -> dict[TP, int | None]:
        return {T: committed}

    c._seek = _seek
    EDGES["committed"] = committed_offsets
    c.assignment = lambda: {T}
    c.callback = callback
    c.getmany = getmany
    app.topics.acks_enabled_for = lambda topic: True  # gaps are recorded for acked topics
    c._committed_offset[T] = committed - 1 if committed else None
    c.fetcher = fetcher
    return c, delivered


async def run(c: Any) -> None:
    await c.perform_seek()
    await asyncio.wait_for(c._drain_messages(c.fetcher), timeout=10)


async def test_a_record_fetched_before_the_seek_hides_nothing_in_the_real_drain_loop() -> None:
    # 510 was fetched before the rebalance's seek back to 494; then the re-fetch from 494
    c, delivered = consumer([[510, 511], [494, 495, 496]], committed=494)
    await run(c)
    assert [o for o in delivered if o < 510] == [494, 495, 496]
    assert not c._gap[T]  # nothing between 494 and 510 counted as acknowledged
    assert not c._read_offset.pending(T) and c._read_offset[T] == 496


async def test_the_real_library_without_the_guard_drops_them() -> None:
    """Shows the bug the patch is for is in this faust-streaming, not only in a copy."""
    c, delivered = consumer([[510, 511], [494, 495, 496]], committed=494)
    c._read_offset = defaultdict(lambda: None)  # faust's own map: the guard steps aside

    async def seek_to_committed() -> dict[TP, int]:  # the library's, minus the network
        return {T: 494}

    c.seek_to_committed = seek_to_committed
    await run(c)
    assert delivered == [510, 511]  # 494..496 were dropped as already read
    assert c._gap[T]  # and 495..509 were recorded as a gap, committed past later


async def test_an_explicit_seek_is_guarded_too() -> None:
    c, delivered = consumer([[40], [30, 31]], committed=0)
    await c.seek(T, 30)
    assert c._read_offset.pending(T)
    await asyncio.wait_for(c._drain_messages(c.fetcher), timeout=10)
    assert delivered == [40, 30, 31]


class Msg:
    """What Consumer.ack reads of a message (weak-referenceable, like faust's)."""

    def __init__(self, offset: int) -> None:
        self.tp, self.topic, self.offset = T, T.topic, offset
        self.acked, self.key, self.value = False, b"k", b"v"


class FakeLog:
    """One partition's records 0..end-1 and a fetch position that a seek moves: what the
    drain loop would get from aiokafka, `batch` records per fetch."""

    def __init__(self, c: Any, end: int, position: int, batch: int = 5) -> None:
        self.end, self.position, self.batch = end, position, batch
        self.seeks: list[int] = []
        EDGES["seek"] = self.seek
        c.getmany = self.getmany
        c.assignment = lambda: {T}

    def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append(offset)
        self.position = offset

    def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Any]]:
        async def batch() -> AsyncIterator[tuple[TP, Any]]:
            await asyncio.sleep(0)
            start = self.position
            self.position = min(self.end, start + self.batch)
            for offset in range(start, self.position):
                yield T, Msg(offset)

        return batch()


async def rebalance_seek_while_reading(late_bookkeeping: bool) -> tuple[Any, FakeLog, list[int]]:
    """After a rebalance, Faust's perform_seek reads the committed offsets while the flow is
    already active: the drain loop reads 30..44 from the fetcher (positioned at the
    committed 30 by an earlier seek) and a commit of 45 happens before the read answers 30.
    `late_bookkeeping` runs the library's own seek_to_committed (aiokafka seeks first,
    and perform_seek records the seek point after the await); otherwise the guard's."""
    c, delivered = consumer([], committed=30)
    log = FakeLog(c, end=80, position=30)

    async def callback(message: Any) -> None:
        delivered.append(message.offset)
        c.ack(message)  # processed

    c.callback = callback
    c._committed_offset[T] = 30
    c._read_offset.expect(T, 30)
    reading = asyncio.ensure_future(c._drain_messages(c.fetcher))

    async def committed_answers_late() -> dict[TP, int | None]:
        while len(delivered) < 15:
            await asyncio.sleep(0)
        # the commit the drain loop makes meanwhile (what Consumer.commit does locally)
        c._committed_offset[T] = c._new_offset(T)
        return {T: 30}

    async def seek_to_committed() -> dict[TP, int]:
        log.seek(T, 30)  # aiokafka seeks before the await; Faust records it after
        return await committed_answers_late()  # type: ignore[return-value]

    EDGES["committed"] = committed_answers_late
    if late_bookkeeping:
        c.seek_to_committed = seek_to_committed  # the library's way, on this consumer only
    await asyncio.wait_for(c.perform_seek(), timeout=10)
    while log.position < log.end:
        await asyncio.sleep(0)
    for _ in range(20):  # let the drain loop deliver the last fetch
        await asyncio.sleep(0)
    c.fetcher._stopped.set()
    await asyncio.wait_for(reading, timeout=10)
    return c, log, delivered


async def test_a_seek_recorded_late_stalls_the_library() -> None:
    """The stall the patch is for, in this faust-streaming: the read and committed offsets
    move back to 30 after 30..44 were read and 45 committed; the guard waits for 30 for
    good and the next commit never comes."""
    c, _, delivered = await rebalance_seek_while_reading(late_bookkeeping=True)
    assert delivered == list(range(30, 80))  # every record was processed once ...
    assert c._read_offset.pending(T)  # ... yet the guard still waits for 30
    assert c._new_offset(T) is None  # and nothing after 45 can be committed


async def test_a_seek_and_its_bookkeeping_in_one_step_drain_to_the_end() -> None:
    c, log, delivered = await rebalance_seek_while_reading(late_bookkeeping=False)
    assert log.seeks == [30]
    assert sorted(set(delivered)) == list(range(30, 80))  # nothing skipped
    assert delivered[-50:] == list(range(30, 80))  # re-read in order from the seek point
    assert not c._read_offset.pending(T)
    assert c._new_offset(T) == 80  # everything read can be committed
