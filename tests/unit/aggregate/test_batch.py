"""Counting in batches whose writes are coalesced (a bucket written once per group, a figure
published once per batch) gives the figures of counting one verdict at a time, and a
crash that cuts the changelog anywhere, replayed from any offset Faust may then have
committed (in batches of other sizes, with the re-keyer's repeats appended), gives them
back. The expected figures come from a reference count over the verdicts written here
and from the one-at-a-time domain, never from the batching under test."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from schemas.events import Outcome, ScenarioReliability, TrialVerdict
from services.aggregate import domain
from services.aggregate.batch import Batch
from tests.unit.aggregate.test_domain import (
    CONFIG,
    NOW,
    T0,
    Table,
    figures,
    latest,
    reference,
    scope,
    verdict,
)


@dataclass
class Worker:
    """The aggregate's count agent over a dict table, as services/aggregate/app.py runs it:
    every write it applies is appended to `log` (the changelog, in order)."""

    table: dict[str, Any] = field(default_factory=dict)
    log: list[tuple[int, str, dict[str, Any] | None]] = field(default_factory=list)
    published: dict[str, ScenarioReliability] = field(default_factory=dict)
    batch_ends: list[int] = field(default_factory=list)  # offset after each batch
    sent: list[tuple[int, list[ScenarioReliability]]] = field(default_factory=list)

    def run(self, verdicts: list[TrialVerdict], sizes: list[int], first: int = 0) -> None:
        at = 0
        while at < len(verdicts):
            size = sizes[len(self.batch_ends) % len(sizes)]
            self.count_batch(verdicts[at : at + size], first + at)
            at += size
            self.batch_ends.append(first + at)

    def count_batch(self, verdicts: list[TrialVerdict], offset: int) -> None:
        batch: Batch[int] = Batch(self.table.get)
        for i, v in enumerate(verdicts, start=offset):
            if batch.starts_group(v):
                self.apply_group(batch)
            step = domain.apply(batch.read, v, 0, CONFIG, now=NOW)
            batch.hold(v, step, i)
            if step.sweep:
                self.apply_group(batch)
                keys, _ = domain.expired(
                    list(self.table.items()), 0, self.table["p|0"]["watermark"], CONFIG, NOW
                )
                for key in keys:
                    self.write(i, key, None)
                self.write(i, "p|0", domain.swept(self.table["p|0"]["watermark"]))
        self.apply_group(batch)
        records = [domain.record(b) for b in batch.figures()]
        self.sent.append((offset, records))
        for r in records:
            self.published[scope(r)] = r

    def apply_group(self, batch: Batch[int]) -> None:
        for key, value, i in batch.group():
            self.write(i, key, value)

    def write(self, i: int, key: str, value: dict[str, Any] | None) -> None:
        self.log.append((i, key, value))
        if value is None:
            self.table.pop(key, None)
        else:
            self.table[key] = value


def spread_traffic(seed: int, trials: int = 40) -> list[TrialVerdict]:
    """Trials over three days and two scenarios; repeats and re-grades (and an old
    attempt after a newer one) arrive anywhere after the first verdict, not only next
    to it."""
    rng = random.Random(seed)
    out: list[TrialVerdict] = []
    later: list[tuple[float, TrialVerdict]] = []  # (position, verdict) of what comes again
    for i in range(trials):
        at = T0 + rng.uniform(-2 * 86400, 86400)
        scenario, run = rng.choice(["s1", "s2"]), rng.choice(["r1", "r2"])
        outcome: Outcome = rng.choice(["passed", "passed", "failed", "error"])
        first = verdict(f"t{i}", outcome, at=at, scenario=scenario, run=run)
        out.append(first)
        if rng.random() < 0.3:
            regraded: Outcome = rng.choice(["passed", "failed", "error"])
            when = rng.uniform(i, trials + 5)
            later.append(
                (when, verdict(f"t{i}", regraded, at=at, scenario=scenario, run=run, attempt=2))
            )
            if rng.random() < 0.3:  # the first grading, delivered again after the re-grade
                later.append((rng.uniform(when, trials + 5), first))
        if rng.random() < 0.2:  # redelivered
            later.append((rng.uniform(i, trials + 5), first))
    for when, v in sorted(later, key=lambda p: p[0], reverse=True):
        out.insert(min(len(out), int(when) + 1), v)
    return out


def without_sweeps(table: dict[str, Any]) -> dict[str, Any]:
    return {
        k: ({"watermark": v["watermark"]} if k.startswith("p|") else v) for k, v in table.items()
    }


def one_at_a_time(traffic: list[TrialVerdict]) -> Table:
    t = Table()
    for v in traffic:
        t.feed(v)
    return t


@pytest.mark.parametrize("seed", range(4))
def test_batches_give_the_figures_of_one_verdict_at_a_time(seed: int) -> None:
    traffic = spread_traffic(seed, trials=80)
    single = one_at_a_time(traffic)
    for sizes in ([1], [7], [500], [3, 11, 2]):
        w = Worker()
        w.run(traffic, sizes)
        # the same table (but when it last swept: the one-at-a-time model never sweeps)
        assert without_sweeps(w.table) == without_sweeps(single), sizes
        assert {k: figures(r) for k, r in w.published.items()} == {
            k: figures(r) for k, r in single.published.items()
        }, sizes
        counts = {
            k: (v["passed"], v["failed"], v["errors"])
            for k, v in w.table.items()
            if k.startswith("b|")
        }
        assert counts == reference(traffic)


def test_a_batch_writes_each_bucket_once_and_publishes_each_figure_once() -> None:
    traffic = [verdict(f"t{i}", "passed" if i % 3 else "failed", at=T0 + i) for i in range(50)]
    w = Worker()
    w.run(traffic, [50])
    written = [key for _, key, _ in w.log]
    assert written.count("b|s1|run|run-1") == 1
    assert sum(1 for key in written if key.startswith("t|")) == 50
    assert len(written) == 50 + 3 + 2 + 1  # memories, run + hour + day, latest x2, clock
    ((_, records),) = w.sent
    assert sorted((r.run_id or "", r.window or "", r.n) for r in records) == [
        ("", "1d", 50),
        ("", "1h", 50),
        ("run-1", "", 50),
    ]


def test_a_trial_seen_again_in_a_batch_starts_a_new_group() -> None:
    first = verdict("a", "passed")
    regrade = verdict("a", "failed", attempt=2)
    w = Worker()
    w.run([first, verdict("b"), verdict("a"), regrade, verdict("c")], [5])
    memories = [i for i, key, _ in w.log if key == "t|s1|a"]
    runs = [i for i, key, _ in w.log if key == "b|s1|run|run-1"]
    # groups: [a, b]; [a again] (a duplicate: nothing to write); [a re-graded, c]. Each
    # writes the run's counts once, last changed by b and by c.
    assert memories == [0, 3]
    assert runs == [1, 4]
    assert w.table["b|s1|run|run-1"]["passed"] == 2  # b and c
    assert w.table["b|s1|run|run-1"]["failed"] == 1  # a, re-graded


@pytest.mark.parametrize("seed", range(3))
def test_a_crash_anywhere_recovers_from_any_offset_faust_may_commit(seed: int) -> None:
    """Faust commits an offset only once every changelog write of the verdicts before it
    was delivered (services/runtime/faust_compat/flush.py), and a batch is acked (its offsets
    committable) only after its writes were applied: from a cut at any write, the restart
    reads again from a batch boundary at or before the first verdict with a write lost,
    in batches of its own sizes; the re-keyer appends repeats from its own committed
    offset; the figures sent before the crash are those of any batches up to the cut."""
    rng = random.Random(seed)
    traffic = spread_traffic(seed + 10, trials=20)
    undisturbed = one_at_a_time(traffic)
    want = {k: v for k, v in undisturbed.items() if k.startswith(("b|", "l|"))}
    want_latest = latest(undisturbed)
    want_figures = {k: figures(r) for k, r in undisturbed.published.items()}
    first = Worker()
    first.run(traffic, [rng.randint(1, 8) for _ in range(10)])
    crashes = 0
    for kept in range(len(first.log) + 1):
        lost_from = first.log[kept][0] if kept < len(first.log) else len(traffic)
        boundaries = [0] + [b for b in first.batch_ends if b <= lost_from]
        for committed in sorted({boundaries[-1], rng.choice(boundaries)}):
            rekeyed_from = rng.randint(0, committed)
            w = Worker()
            for _, key, value in first.log[:kept]:  # the table restored from the changelog
                if value is None:
                    w.table.pop(key, None)
                else:
                    w.table[key] = value
            # figures of every batch before the commit, and maybe some after it
            sent_until = rng.choice(
                [
                    b
                    for b in [0, *first.batch_ends]
                    if committed <= b <= max(committed, lost_from + 1)
                ]
                or [committed]
            )
            for offset, records in first.sent:
                if offset < sent_until:
                    for r in records:
                        w.published[scope(r)] = r
            again = traffic[committed:] + traffic[rekeyed_from:]
            w.run(again, [rng.randint(1, 9) for _ in range(10)], first=committed)
            assert {k: v for k, v in w.table.items() if k.startswith(("b|", "l|"))} == want, (
                kept,
                committed,
                rekeyed_from,
            )
            assert latest(Table() | w.table) == want_latest  # type: ignore[arg-type]
            assert {k: figures(r) for k, r in w.published.items()} == want_figures, (
                kept,
                committed,
            )
            crashes += 1
    assert crashes > 150, crashes
