"""The seek guard inside faust-streaming's own consumer: the library's real
`perform_seek`, `seek`, `_drain_messages` and `_add_gap` run; only the network edges
(committed offsets, the fetch) are replaced by a scripted sequence of records."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.types import TP

import services.common.faust_fixes as fixes

T = TP("passk.t.conversation-finished.v1", 3)


def consumer(batches: list[list[int]], committed: int) -> tuple[Any, list[int]]:
    app = faust.App("passk-fix-test", broker="kafka://127.0.0.1:1")
    c: Any = app.consumer
    delivered: list[int] = []
    fetcher = SimpleNamespace(_stopped=asyncio.Event())
    pending = list(batches)

    async def seek_to_committed() -> dict[TP, int]:
        return {T: committed}

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

    c.seek_to_committed = seek_to_committed
    c._seek = _seek
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
    await run(c)
    assert delivered == [510, 511]  # 494..496 were dropped as already read
    assert c._gap[T]  # and 495..509 were recorded as a gap, committed past later


async def test_an_explicit_seek_is_guarded_too() -> None:
    c, delivered = consumer([[40], [30, 31]], committed=0)
    await c.seek(T, 30)
    assert c._read_offset.pending(T)
    await asyncio.wait_for(c._drain_messages(c.fetcher), timeout=10)
    assert delivered == [40, 30, 31]


def test_the_patch_refuses_another_faust_version(monkeypatch: pytest.MonkeyPatch) -> None:
    assert faust.__version__ == fixes.PATCHED_VERSION  # what pyproject pins
    monkeypatch.setattr(faust, "__version__", "0.16.0")
    with pytest.raises(RuntimeError, match="patches faust-streaming 0.15.3"):
        fixes.apply()
