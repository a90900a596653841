"""Flow control of a join: the input ahead waits in the log while the other is read; it
never pauses both, never pauses an input whose partner has nothing left to read, and a
pause mid-batch hands out what Faust had already fetched (nothing is skipped)."""

from __future__ import annotations

import random
import weakref
from types import SimpleNamespace
from typing import Any

import faust
from faust import streams as faust_streams
from faust.types import TP

from services.runtime.flow import JoinFlow, paused_inputs

A, B = "in-a", "in-b"


def test_the_input_ahead_is_paused_while_the_other_has_records_to_read() -> None:
    waiting = {0: {B: 11}, 1: {B: 3}}
    assert paused_inputs(waiting, set(), lambda t, p: True, (A, B), [0, 1], 10) == {(A, 0)}
    # its trials wait for A: B is the one ahead
    assert paused_inputs({0: {A: 11}}, set(), lambda t, p: True, (A, B), [0], 10) == {(B, 0)}


def test_nothing_is_paused_when_the_awaited_input_has_nothing_left_to_read() -> None:
    # the pending trials wait for records not yet written: pausing could only stall
    assert paused_inputs({0: {B: 1000}}, set(), lambda t, p: t != B, (A, B), [0], 10) == set()


def test_a_pause_lasts_until_the_waiters_are_down_to_half() -> None:
    unread = lambda t, p: True  # noqa: E731
    assert paused_inputs({0: {B: 6}}, {(A, 0)}, unread, (A, B), [0], 10) == {(A, 0)}
    assert paused_inputs({0: {B: 5}}, {(A, 0)}, unread, (A, B), [0], 10) == set()
    assert paused_inputs({0: {B: 6}}, set(), unread, (A, B), [0], 10) == set()


def test_never_both_inputs_of_a_partition() -> None:
    # both over the bound (the inputs' orders differ): only the one further ahead waits
    got = paused_inputs({0: {A: 40, B: 50}}, {(B, 0)}, lambda t, p: True, (A, B), [0], 10)
    assert got == {(A, 0)}


def simulate(
    a_log: list[str], b_log: list[str], bound: int, chunk: int, seed: int = 0
) -> tuple[set[str], int]:
    """A join reading two logs of one partition `chunk` records at a time from whichever
    input is not paused (either, at random, when both may be read), the policy applied
    after every chunk. Returns the keys joined and the largest pending set seen."""
    rng = random.Random(seed)
    logs = {A: a_log, B: b_log}
    pos = {A: 0, B: 0}
    seen: dict[str, set[str]] = {}
    joined: set[str] = set()
    paused: set[tuple[str, int]] = set()
    most = 0
    for _ in range(10 * (len(a_log) + len(b_log))):
        readable = [t for t in (A, B) if (t, 0) not in paused and pos[t] < len(logs[t])]
        if not readable:
            break
        topic = rng.choice(readable)
        for key in logs[topic][pos[topic] : pos[topic] + chunk]:
            seen.setdefault(key, set()).add(topic)
            if seen[key] == {A, B}:
                joined.add(key)
                del seen[key]
        pos[topic] = min(pos[topic] + chunk, len(logs[topic]))
        most = max(most, len(seen))
        waiting = {
            0: {
                B: sum(1 for s in seen.values() if s == {A}),
                A: sum(1 for s in seen.values() if s == {B}),
            }
        }
        paused = paused_inputs(
            waiting, paused, lambda t, p: pos[t] < len(logs[t]), (A, B), [0], bound
        )
    assert pos == {A: len(a_log), B: len(b_log)}, "a paused input was never read to the end"
    return joined, most


def test_a_pending_set_full_of_trials_whose_other_side_is_far_behind_drains() -> None:
    keys = [f"t{i}" for i in range(2000)]
    # B's records come in the same order, but B is read from far behind: 1,500 trials
    # of A are pending before the first of B
    joined, most = simulate(keys, keys, bound=50, chunk=20)
    assert joined == set(keys)
    assert most <= 2 * 50 + 20


def test_orphans_on_one_side_do_not_stall_the_join() -> None:
    keys = [f"t{i}" for i in range(1000)]
    orphans = [f"o{i}" for i in range(300)]  # sessions whose conversation never comes
    b_log = keys[:]
    for i, orphan in enumerate(orphans):
        b_log.insert(3 * i, orphan)
    joined, _ = simulate(keys, b_log, bound=50, chunk=20, seed=3)
    assert joined == set(keys)


def test_inputs_in_different_orders_are_still_read_to_the_end() -> None:
    keys = [f"t{i}" for i in range(1000)]
    shuffled = keys[:]
    random.Random(1).shuffle(shuffled)
    joined, _ = simulate(keys, shuffled, bound=20, chunk=10, seed=5)
    assert joined == set(keys)


class Event:
    def __init__(self, partition: int) -> None:
        self.message = SimpleNamespace(partition=partition)


def as_current(event: Event) -> Any:
    return faust_streams._current_event.set(weakref.ref(event))  # type: ignore[arg-type]


def test_pending_trials_are_counted_by_partition_and_the_input_they_wait_for() -> None:
    flow = JoinFlow(
        SimpleNamespace(), (A, B), 10, waits_on=lambda state: state, unread=lambda t, p: True
    )
    event = Event(2)
    token = as_current(event)
    try:
        flow.note("k1", B)
        flow.note("k2", B)
        flow.note("k1", A)  # k1's state changed: it now waits for A
        flow.note("k2", None)  # k2 joined
    finally:
        faust_streams._current_event.reset(token)
    assert flow.waiting == {2: {A: 1, B: 0}}
    assert flow.pending() == 1
    flow.forget_missing(lambda key: key != "k1")  # a rebalance took k1's partition
    assert flow.pending() == 0 and flow.waiting == {2: {A: 0, B: 0}}


def faust_consumer() -> tuple[Any, list[set[TP]]]:
    """faust-streaming's own Consumer.getmany, with only the fetch replaced: every active
    partition returns records 0, 1, 2."""
    app = faust.App("passk-flow-test", broker="kafka://127.0.0.1:1")
    c: Any = app.consumer
    asked: list[set[TP]] = []

    async def _getmany(active_partitions: set[TP], timeout: float) -> dict[TP, list[Any]]:
        asked.append(set(active_partitions))
        return {tp: [SimpleNamespace(offset=i) for i in range(3)] for tp in active_partitions}

    c.assignment = lambda: {TP(A, 0), TP(B, 0)}
    c._set_active_tps(c.assignment())
    c._getmany = _getmany
    c.highwater = lambda tp: 3
    c._to_message = lambda tp, record: (tp.topic, record.offset)
    return c, asked


async def test_a_pause_mid_batch_hands_out_the_records_already_fetched() -> None:
    c, asked = faust_consumer()
    app = SimpleNamespace(consumer=c, rebalancing=False, in_recovery=False)
    flow = JoinFlow(app, (A, B), 10, waits_on=lambda s: s, unread=lambda t, p: True)
    flow.waiting = {0: {B: 11}}  # trials wait for B: A is ahead
    got = []
    async for _tp, message in c.getmany(timeout=1.0):
        got.append(message)
        if len(got) == 1:
            flow.adjust()
    assert sorted(got) == [(A, 0), (A, 1), (A, 2), (B, 0), (B, 1), (B, 2)]
    assert flow.paused == {(A, 0)}
    async for _ in c.getmany(timeout=1.0):
        pass
    assert asked[-1] == {TP(B, 0)}  # A is no longer fetched
    flow.waiting = {0: {B: 5}}
    flow.adjust()
    async for _ in c.getmany(timeout=1.0):
        pass
    assert asked[-1] == {TP(A, 0), TP(B, 0)} and flow.paused == set()


async def test_faust_alone_drops_them_which_is_why_the_partition_is_marked_buffered() -> None:
    c, _ = faust_consumer()
    got = []
    async for _tp, message in c.getmany(timeout=1.0):
        got.append(message)
        if len(got) == 1:
            c.pause_partitions({TP(A, 0)})
    # the first record was handed out, then the fetched records of A never were:
    # Faust's drain loop would record the skipped offsets as a gap and commit past them
    assert 0 < len(got) < 6 and (A, 2) not in got


async def test_a_partition_faust_resumed_or_revoked_is_no_longer_marked() -> None:
    c, _ = faust_consumer()
    app = SimpleNamespace(consumer=c, rebalancing=False, in_recovery=False)
    flow = JoinFlow(app, (A, B), 10, waits_on=lambda s: s, unread=lambda t, p: True)
    flow.waiting = {0: {B: 11}}
    flow.adjust()
    assert TP(A, 0) in c._buffered_partitions
    c.resume_partitions({TP(A, 0)})  # what Faust does after a rebalance's recovery
    flow.waiting = {0: {}}
    flow.adjust()
    assert flow.paused == set() and TP(A, 0) not in c._buffered_partitions
