"""The deadline ticker: a tick costs what is due, whatever the table holds."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from services.runtime.ticks import DeadlineTicker


class Table(dict):  # what the ticker reads of a Faust table: items()
    pass


class Ticks:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, dict[str, Any]]] = []

    async def send(self, key: bytes, value: bytes) -> None:
        self.sent.append((key, json.loads(value)))


def ticker(table: dict[str, Any] | None = None) -> tuple[DeadlineTicker, Ticks]:
    ticks = Ticks()
    t = DeadlineTicker(Table(table or {}), ticks, again_after_s=10.0)  # type: ignore[arg-type]
    return t, ticks


def schedule(t: DeadlineTicker, key: str, due_at: float | None) -> None:
    """As a processor does: store the key's state (with its due time), then schedule it."""
    if due_at is None:
        t.table.pop(key, None)  # type: ignore[attr-defined]
    else:
        t.table[key] = {"state": {}, "due_at": due_at}
    t.schedule(key, due_at)


def test_only_due_keys_are_ticked_in_due_order() -> None:
    t, ticks = ticker()
    schedule(t, "late", 300.0)
    schedule(t, "soon", 100.0)
    schedule(t, "sooner", 50.0)
    assert asyncio.run(t.tick_due(100.0)) == 2
    assert [k for k, _ in ticks.sent] == [b"sooner", b"soon"]
    assert ticks.sent[0][1] == {"tick_at": 100.0}


def test_a_rescheduled_or_forgotten_key_is_not_ticked_at_its_old_time() -> None:
    t, _ = ticker()
    schedule(t, "moved", 10.0)
    schedule(t, "moved", 500.0)
    schedule(t, "gone", 10.0)
    schedule(t, "gone", None)
    assert t.due(100.0) == []
    assert t.due(500.0) == ["moved"]
    assert t.pending() == 1  # moved, rescheduled for a retry


def test_a_ticked_key_is_ticked_again_if_nothing_changes_it() -> None:
    t, _ = ticker()
    schedule(t, "k", 10.0)
    assert t.due(10.0) == ["k"]
    assert t.due(15.0) == []  # not flooded while its tick is on the way
    assert t.due(20.0) == ["k"]  # the tick was lost, or the clock was behind: once more
    schedule(t, "k", None)  # the agent handled it and forgot the key
    assert t.due(1000.0) == []


def test_the_cost_of_a_tick_is_what_is_due_not_what_is_held() -> None:
    t, _ = ticker()
    for i in range(20_000):
        schedule(t, f"k{i}", 1_000.0 + i)  # a long tail of keys due later
    t.due(0.0)
    examined = 0
    real_pop = __import__("heapq").heappop

    def counting_pop(heap: list) -> Any:
        nonlocal examined
        examined += 1
        return real_pop(heap)

    import services.runtime.ticks as ticks_module

    ticks_module.heapq.heappop, saved = counting_pop, ticks_module.heapq.heappop  # type: ignore[assignment]
    try:
        assert t.due(1_002.0) == ["k0", "k1", "k2"]
    finally:
        ticks_module.heapq.heappop = saved  # type: ignore[assignment]
    assert examined == 3


def test_after_a_rebalance_the_restored_table_is_scheduled_once() -> None:
    table = {
        "a": {"state": {}, "due_at": 5.0},
        "b": {"state": {}, "due_at": 50.0},
        "c": {"state": {}, "due_at": None},
    }
    t, _ = ticker(table)
    assert t.due(10.0) == ["a"]  # the first tick seeds from the table
    schedule(t, "a", None)  # handled
    t.table["d"] = {"state": {}, "due_at": 1.0}  # restored from the changelog, not scheduled
    assert t.due(11.0) == []
    t.reseed()
    assert t.due(60.0) == ["d", "b"]  # in due order
    del t.table["b"]  # its partition was revoked
    t.reseed()
    assert t.due(1000.0) == ["d"]


def test_a_key_whose_partition_is_behind_is_not_ticked_until_the_stream_reaches_its_due_time() -> (
    None
):
    from services.runtime.outbox import handling

    class Event:
        def __init__(self, partition: int) -> None:
            self.message = type("Message", (), {"partition": partition})()

    stream_time = {0: 50.0, 1: 1000.0}  # partition 0 is far behind (a backlog), 1 caught up
    t = DeadlineTicker(
        Table(),
        Ticks(),
        again_after_s=10.0,  # type: ignore[arg-type]
        stream_now=lambda p: stream_time[p],
    )
    for key, partition in (("behind", 0), ("caught-up", 1)):
        with handling(Event(partition)):  # type: ignore[arg-type]
            schedule(t, key, 100.0)
    assert t.due(now=200.0) == ["caught-up"]
    # ("caught-up" is ticked again every 10 s until the processor stores a new state)
    assert "behind" not in t.due(now=210.0)  # looked at again, still behind: no tick
    stream_time[0] = 99.0
    assert "behind" not in t.due(now=220.0)  # compared with its own due time, not the retry's
    stream_time[0] = 100.0
    assert "behind" in t.due(now=230.0)
