"""Flow control for a join: a backlog is held in Kafka, not in RAM.

The gate joins two inputs by session and the verdict two by trial; a trial whose first
input has been read waits, pending in RAM, for its second. Faust reads the partitions of
the two inputs as they come, not in time order: in a backlog (a replay sent at once, a
worker restarted behind) one input is read far ahead of the other (sessions are smaller
than conversations, so one fetch holds more of them; the judge outruns the gate), and
tens of thousands of trials wait at once, one side of each held in RAM.

So, per partition: when more than PASSK_JOIN_MAX_PENDING of its pending trials wait for
input B while B still has records to read, the other input A (the one ahead) stops being
read on that partition; it is read again once they are down to half, or once B has
nothing left to read. Nothing is skipped: Faust's consumer keeps the paused partition's
fetched records and its position, and the records wait in the log.

It cannot deadlock: at most one input of a partition is paused, and only while the other
has records left to read, which are then read. When B has nothing left (the pending
trials wait for records not yet written: an upstream processor behind, sessions that
never come) nothing is paused, so a deadline never waits on a paused input, and the
pending set is then bounded by how far the writers of B are behind, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import faust
from faust.types import TP

from services.runtime.faust_compat import (
    current_event,
    forget_paused,
    on_recovery_completed,
    pause_keeping_fetched,
    paused_partitions,
    resume_paused,
)

log = logging.getLogger(__name__)
PartitionInput = tuple[str, int]  # (topic, partition)


def paused_inputs(
    waiting: Mapping[int, Mapping[str, int]],
    paused: set[PartitionInput],
    unread: Callable[[str, int], bool],
    inputs: tuple[str, str],
    partitions: Iterable[int],
    bound: int,
) -> set[PartitionInput]:
    """Which (input, partition) should not be read now.

    `waiting[p][topic]`: pending trials of partition p waiting for a record of `topic`;
    `paused`: what is paused now (a paused input keeps its pause until its waiters are
    down to half the bound); `unread(topic, p)`: whether that input has records left.
    """
    out: set[PartitionInput] = set()
    a, b = inputs
    for p in partitions:
        counts = waiting.get(p, {})
        best: tuple[int, str] | None = None
        for ahead, behind in ((a, b), (b, a)):
            waiters = counts.get(behind, 0)
            limit = bound // 2 if (ahead, p) in paused else bound
            if waiters > limit and unread(behind, p) and (best is None or waiters > best[0]):
                best = (waiters, ahead)
        if best is not None:
            out.add((best[1], p))
    return out


class JoinFlow:
    """Counts a join's pending trials per partition by the input they wait for, and
    pauses and resumes the inputs' partitions (`adjust`, from a timer)."""

    def __init__(
        self,
        app: faust.App,
        inputs: tuple[str, str],
        bound: int,
        waits_on: Callable[[Any], str | None],
        unread: Callable[[str, int], bool],
    ) -> None:
        self.app = app
        self.inputs = inputs
        self.bound = bound
        self.waits_on = waits_on  # a pending state -> the input topic it waits for
        self.unread = unread
        self._by_key: dict[str, tuple[int, str]] = {}
        self.waiting: dict[int, dict[str, int]] = {}
        self.paused: set[PartitionInput] = set()

    def note(self, key: str, state: Any) -> None:
        """A key's state was written (None: it is no longer pending)."""
        old = self._by_key.pop(key, None)
        if old is not None:
            self.waiting[old[0]][old[1]] -= 1
        topic = self.waits_on(state) if state is not None else None
        if topic is None:
            return
        event = current_event()
        partition = event.message.partition if event is not None else -1
        self._by_key[key] = (partition, topic)
        counts = self.waiting.setdefault(partition, {})
        counts[topic] = counts.get(topic, 0) + 1

    def forget_missing(self, present: Callable[[str], bool]) -> None:
        """After a rebalance: drop the keys the table no longer holds."""
        for key in [k for k in self._by_key if not present(k)]:
            self.note(key, None)

    def adjust(self) -> None:
        if self.bound <= 0 or self.app.rebalancing or self.app.in_recovery:
            return
        consumer: Any = self.app.consumer  # faust's Consumer: pause/resume are not on ConsumerT
        assigned = {tp.partition for tp in consumer.assignment() if tp.topic in self.inputs}
        # Faust resumes every partition after a rebalance's recovery: what is paused now
        # is what its consumer says, not what this object last did.
        faust_paused = paused_partitions(consumer)
        for topic, p in self.paused:
            if TP(topic, p) not in faust_paused:  # revoked, or resumed by Faust
                forget_paused(consumer, TP(topic, p))
        self.paused = {(t, p) for t, p in self.paused if TP(t, p) in faust_paused}
        want = paused_inputs(
            self.waiting, self.paused, self.unread, self.inputs, assigned, self.bound
        )
        for topic, p in self.paused - want:
            resume_paused(consumer, TP(topic, p))
            log.info("join flow: reading %s[%d] again", topic, p)
        for topic, p in want - self.paused:
            # The records already fetched of it are still handed out (not dropped from
            # the batch and committed past as a gap); no new fetch returns it.
            pause_keeping_fetched(consumer, TP(topic, p))
            log.info(
                "join flow: %s[%d] paused, %s pending trials wait for the other input",
                topic,
                p,
                self.waiting.get(p, {}),
            )
        self.paused = want

    def pending(self) -> int:
        return len(self._by_key)


ADJUST_EVERY_S = 0.5


def join_flow(
    app: faust.App,
    table: faust.types.TableT[str, Any],
    inputs: tuple[str, str],
    bound: int,
    waits_on: Callable[[Any], str | None],
    unread: Callable[[str, int], bool],
) -> JoinFlow:
    """A JoinFlow for `table`'s pending trials, adjusted every ADJUST_EVERY_S (a timer:
    nothing per record but the count)."""
    flow = JoinFlow(app, inputs, bound, waits_on, unread)
    on_recovery_completed(table, "join_flow", lambda: flow.forget_missing(lambda key: key in table))

    @app.timer(interval=ADJUST_EVERY_S)
    async def adjust_join_flow() -> None:
        flow.adjust()

    return flow
