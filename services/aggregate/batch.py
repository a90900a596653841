"""A batch of verdicts' table writes and figures, coalesced: pure, no Faust.

Counting one verdict changes its trial's memory and about three buckets; written one by
one, a batch of verdicts sent each bucket to the changelog once per verdict, and a
figure per changed bucket to `scenario-reliability`, which was most of the aggregate's
cost (bench/README.md). Here the verdicts of a batch are counted one after another
against the batch's own view of the table (`read` sees what the batch holds), and:

- the writes are held in *groups* and applied group by group, each group's trial
  memories first, then its buckets (each once, with its last value), then each
  scenario's most recent windows, then the partitions' clocks;
- the figures are published once per batch: the last of each bucket.

A crash can cut the changelog after any write, and the verdicts are then read again
from the last committed offset (never past a verdict whose writes were not all
delivered). What then stands in the table is whole groups plus part of one: some of its
trial memories, perhaps some of its buckets. A memory whose bucket was lost numbers the
change the bucket is missing (domain.py), and a verdict read again finishes a change
only when the bucket stands just before it, so the missing changes are finished in the
order they were first made, each by the verdict that made it (or, further behind, by
the very attempt that made it: the earlier change's verdict was then not read again).
That holds only if a trial changes at most once per group: a trial seen again in the
group starts a new one (a duplicate too: read again, it would finish its trial's later
change before the changes of the trials between them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from schemas.events import TrialVerdict
from services.aggregate.domain import Bucket, Read, Step, trial_key

Tag = TypeVar("Tag")  # what the caller needs to apply a write (the Faust event that made it)
Write = tuple[str, dict[str, Any] | None, Tag]

# Order of the kinds of key within a group: memories before the buckets whose change
# they number, the clock (which makes older verdicts late) after everything it covers.
_ORDER = {"t|": 0, "b|": 1, "l|": 2, "p|": 3}


@dataclass
class Batch(Generic[Tag]):
    table: Read  # the table as applied so far
    _held: dict[str, tuple[dict[str, Any] | None, Tag]] = field(default_factory=dict)
    _trials: set[str] = field(default_factory=set)  # the trials of the group being held
    _figures: dict[str, Bucket] = field(default_factory=dict)

    def read(self, key: str) -> dict[str, Any] | None:
        held = self._held.get(key)
        return held[0] if held is not None else self.table(key)

    def starts_group(self, verdict: TrialVerdict) -> bool:
        """Whether the writes held so far must be applied before `verdict` is counted."""
        return trial_key(verdict.scenario_id, verdict.trial_id) in self._trials

    def hold(self, verdict: TrialVerdict, step: Step, tag: Tag) -> None:
        self._trials.add(trial_key(verdict.scenario_id, verdict.trial_id))
        for key, value in step.writes:
            self._held[key] = (value, tag)
        for bucket in step.figures:
            self._figures[bucket_id(bucket)] = bucket

    def group(self) -> list[Write[Tag]]:
        """The held writes in the order they must be applied; the batch holds none after."""
        writes = sorted(
            ((key, value, tag) for key, (value, tag) in self._held.items()),
            key=lambda w: _ORDER.get(w[0][:2], len(_ORDER)),
        )
        self._held.clear()
        self._trials.clear()
        return writes

    def figures(self) -> Iterator[Bucket]:
        """Each bucket's last figure of the batch (the batch's writes applied first)."""
        figures, self._figures = self._figures, {}
        return iter(figures.values())


def bucket_id(bucket: Bucket) -> str:
    return f"{bucket.scenario_id}|{bucket.run_id}|{bucket.window}|{bucket.window_start}"
