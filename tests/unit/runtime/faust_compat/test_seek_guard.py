from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from services.runtime.faust_compat import seek_guard
from services.runtime.faust_compat.seek_guard import SeekGuardedReadOffsets

T = TP("passk.conversation-finished.v1", 3)


def drain(offsets: SeekGuardedReadOffsets, records: list[int]) -> tuple[list[int], list[int]]:
    """What faust's drain loop does with each record: deliver it when offset >= read
    offset, then remember it as read. Returns (delivered, dropped)."""
    delivered, dropped = [], []
    for offset in records:
        read = offsets[T]
        if read is None or offset >= read:
            delivered.append(offset)
            offsets[T] = offset
        else:
            dropped.append(offset)
    return delivered, dropped


def test_after_a_seek_records_from_the_seek_point_are_read() -> None:
    offsets = SeekGuardedReadOffsets()
    offsets.update({T: 494})
    assert drain(offsets, [494, 495, 496]) == ([494, 495, 496], [])
    assert not offsets.pending(T)


def test_a_record_fetched_before_the_seek_does_not_hide_the_ones_after_the_seek_point() -> None:
    offsets = SeekGuardedReadOffsets()
    offsets.update({T: 494})
    # 510 was prefetched before the seek; then the re-fetch starts at 494
    delivered, dropped = drain(offsets, [510, 511, 494, 495, 496])
    assert dropped == []
    assert delivered[2:] == [494, 495, 496]  # nothing between the seek point and 510 is lost
    assert not offsets.pending(T) and offsets[T] == 496


def test_without_the_guard_faust_would_drop_them() -> None:
    plain: dict[TP, int | None] = {T: 494}
    dropped = []
    for offset in [510, 494, 495]:
        read = plain[T]
        if read is None or offset >= read:
            plain[T] = offset
        else:
            dropped.append(offset)
    assert dropped == [494, 495]


def test_a_real_hole_at_the_seek_point_settles_once_offsets_go_back() -> None:
    offsets = SeekGuardedReadOffsets()
    offsets.update({T: 100})
    # a stale 130, then the re-fetch from the seek point finds 100..104 compacted away
    delivered, dropped = drain(offsets, [130, 105, 106])
    assert dropped == [] and delivered == [130, 105, 106]
    assert not offsets.pending(T)


def test_no_committed_offset_means_nothing_pending() -> None:
    offsets = SeekGuardedReadOffsets()
    offsets.update({T: None})
    assert offsets[T] is None and not offsets.pending(T)


def test_revoking_a_partition_forgets_its_seek() -> None:
    offsets = SeekGuardedReadOffsets()
    offsets.update({T: 7})
    offsets.pop(T, None)
    assert not offsets.pending(T) and offsets[T] is None


def test_the_patch_is_installed_on_faust_consumers() -> None:
    import faust

    from services.runtime import faust_compat

    faust_compat.apply()
    app = faust.App("passk-guard-installed", broker="kafka://127.0.0.1:1")
    assert isinstance(app.consumer._read_offset, SeekGuardedReadOffsets)


class _Client:
    """aiokafka's consumer as read_committed sees it: two partitions, one never committed."""

    def __init__(self, committed: dict[TP, int | None], start: dict[TP, int]) -> None:
        self._committed, self._start = committed, start

    def assignment(self) -> set[TP]:
        return set(self._committed)

    async def committed(self, tp: TP) -> int | None:
        return self._committed[tp]

    async def beginning_offsets(self, tps: list[TP]) -> dict[TP, int]:
        return {tp: self._start[tp] for tp in tps}


def _consumer(client: _Client, reset: str) -> Any:
    async def call_thread(fn: Any) -> Any:
        return await fn()

    thread = SimpleNamespace(_ensure_consumer=lambda: client, call_thread=call_thread)
    return SimpleNamespace(
        _thread=thread, app=SimpleNamespace(conf=SimpleNamespace(consumer_auto_offset_reset=reset))
    )


NEVER = TP("passk.trial-verdicts.v1", 0)


def test_a_partition_never_committed_resumes_from_its_first_offset() -> None:
    # A soak lost the first verdicts of partitions the aggregate had never committed:
    # Faust dropped the rest of a fetched batch on a generation change, and its seek back
    # "to the committed offset" left those partitions where the fetcher was, past them.
    client = _Client({T: 494, NEVER: None}, {T: 0, NEVER: 0})
    offsets = asyncio.run(seek_guard.read_committed(_consumer(client, "earliest")))
    assert offsets == {T: 494, NEVER: 0}


def test_a_group_that_starts_at_the_latest_offset_is_left_as_it_was() -> None:
    client = _Client({T: 494, NEVER: None}, {T: 0, NEVER: 0})
    offsets = asyncio.run(seek_guard.read_committed(_consumer(client, "latest")))
    assert offsets == {T: 494, NEVER: None}


def test_a_trimmed_partition_resumes_from_the_first_offset_it_still_holds() -> None:
    client = _Client({NEVER: None}, {NEVER: 1200})
    offsets = asyncio.run(seek_guard.read_committed(_consumer(client, "earliest")))
    assert offsets == {NEVER: 1200}
    guard = SeekGuardedReadOffsets()
    guard.update(offsets)  # what perform_seek does with them: the first record is awaited
    assert guard.pending(NEVER) and guard[NEVER] == 1200
