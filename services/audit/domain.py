"""Reconciling every trial from its input to the aggregate's counts: pure, no Kafka.

The audit follows each trial (a distinct trial id of a valid ConversationFinished) through
the stages the pipeline promises it: a gate result, a verdict of every judge the scenario
names, a trial verdict, a projection row holding that verdict, and the aggregate's count
of it in its run and in each window of its `finished_at`. A trial that stopped short is
named with the first stage it did not reach (`stopped_at`); a trial dead-lettered on the
way (an unknown scenario, say) is accounted for, with its reason, not unaccounted.

The aggregate's counts are read from its own table (what a restarted aggregate continues
from), through `AggregateTable`: which scopes a trial's change landed in, and each
scope's counts. Every scope the verdicts say should exist is compared with the table; a
scope that disagrees while no trial of it is missing on its own (a bucket written wrong,
a change numbered past) is still reported, with no trial id.

A trial younger than the grace (its deadlines not yet passed) is `in_flight`, not
unaccounted: the pipeline may still be working on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from services.grading.windows import WindowSize, parse_scope, scope_key

Stage = Literal["gate", "judge", "verdict", "projection", "aggregate_run", "aggregate_window"]
STAGES: tuple[Stage, ...] = (
    "gate",
    "judge",
    "verdict",
    "projection",
    "aggregate_run",
    "aggregate_window",
)
# The stages reached, as counted in the report (`stages`): each trial that reached it.
REACHED = ("finished", "gated", "judged", "verdict", "projected", "aggregated")
# A trial stopped at STAGES[i] reached every stage whose index here is below i.
_REACHED_PAST = {
    "finished": -1,
    "gated": 0,
    "judged": 1,
    "verdict": 2,
    "projected": 3,
    "aggregated": 5,
}
OUTCOMES = ("passed", "failed", "errors")


class AggregateTable(Protocol):
    """What the audit needs of the aggregate's table (the aggregate implements it over its
    changelog: services/aggregate/table.py)."""

    def trial(self, scenario_id: str, trial_id: str) -> tuple[int, str, frozenset[str]] | None:
        """(attempt, outcome, scope keys its change landed in) of a trial it remembers."""

    def scopes(self) -> Iterable[tuple[str, str, int, int, int]]:
        """(scenario_id, scope key, passed, failed, errors) of every bucket it holds."""


@dataclass(frozen=True)
class TrialFacts:
    """What the log and the projection hold of one trial."""

    trial_id: str
    run_id: str
    scenario_id: str
    finished_at: float | None  # event time (occurred_at of the conversation), epoch s
    logged_at: float  # when its ConversationFinished reached the log, epoch s
    gated: bool = False
    judges: frozenset[str] = frozenset()  # judges with a verdict for it
    expected_judges: frozenset[str] = frozenset()  # the judges its scenario names
    verdict_attempt: int | None = None  # the newest verdict's
    verdict_outcome: str | None = None
    verdict_event_id: str | None = None
    verdict_logged_at: float | None = None
    # the event time the verdict carries (None when assembled without its gate result):
    # what the aggregate files the trial's windows by
    verdict_finished_at: float | None = None
    projected_event_id: str | None = None  # the verdict the projection's row holds
    dead_letter: str | None = None  # the reason, when a processor dead-lettered its input


@dataclass(frozen=True)
class Bounds:
    """Which windows the aggregate still keeps, and how young a trial may still be busy."""

    sizes: tuple[WindowSize, ...]
    now: float
    retention_s: float
    max_skew_s: float
    grace_s: float  # a trial younger than this (by log time) is in flight, not lost
    window_cutoff: float  # windows starting before this are gone or may be (retention)


def bounds(
    sizes: tuple[WindowSize, ...],
    *,
    now: float,
    retention_s: float,
    max_skew_s: float,
    grace_s: float,
    newest_finished: float | None,
) -> Bounds:
    """The aggregate forgets windows a retention behind its watermark (the newest event
    time it read, never past the wall clock plus the skew): windows starting before that,
    by the newest event time the audit saw, are not compared."""
    watermark = min(newest_finished if newest_finished is not None else now, now + max_skew_s)
    return Bounds(sizes, now, retention_s, max_skew_s, grace_s, watermark - retention_s)


class Unaccounted(BaseModel):
    trial_id: str | None  # None: a scope wrong with no trial of it missing on its own
    run_id: str | None
    scenario_id: str
    stopped_at: Stage
    detail: str


class Counts(BaseModel):
    passed: int = 0
    failed: int = 0
    errors: int = 0

    @property
    def n(self) -> int:
        return self.passed + self.failed + self.errors

    def add(self, outcome: str) -> None:
        if outcome == "invalid":
            # A trial its simulated user spoiled is in none of the three counts (the
            # aggregate counts it apart, and the audit does not compare that count yet).
            return
        name = "errors" if outcome == "error" else outcome
        setattr(self, name, getattr(self, name) + 1)


class ScopeMismatch(BaseModel):
    scenario_id: str
    scope: str  # "run" or the window size label
    run_id: str | None
    window_start: int | None
    counted: Counts
    expected: Counts


class Repaired(BaseModel):
    regraded: int = 0
    reprojected: int = 0
    recounted_scopes: int = 0


# At most this many unaccounted trials are listed (all are counted, by stage): an audit
# of a week in which a stage was down must not hold every lost trial in memory.
LISTED = 10_000


class AuditReport(BaseModel):
    clean: bool
    trials: int
    stages: dict[str, int]
    in_flight: int = 0
    dead_lettered: dict[str, int] = Field(default_factory=dict)
    unaccounted_by_stage: dict[str, int] = Field(default_factory=dict)
    unaccounted: list[Unaccounted] = Field(default_factory=list)  # the first LISTED
    scopes: list[ScopeMismatch] = Field(default_factory=list)
    repaired: Repaired | None = None


# ----------------------------------------------------------------------- trials


def windows_of(facts: TrialFacts, b: Bounds) -> list[str]:
    """The window scopes the aggregate counts a trial in, by its verdict's event time: none
    for a verdict with none, one dated past the bound when it was read (`future`), or one
    in a window the audit does not compare (older than the retention)."""
    at = facts.verdict_finished_at
    if at is None:
        return []
    read_at = facts.verdict_logged_at if facts.verdict_logged_at is not None else b.now
    if at > read_at + b.max_skew_s:
        return []
    out = []
    for size in b.sizes:
        start = size.start(at)
        if start >= b.window_cutoff:
            out.append(scope_key(size.label, None, start))
    return out


def remembered_until(facts: TrialFacts, b: Bounds) -> bool:
    """Whether the aggregate still remembers this trial (its memory expires a retention
    behind the watermark; a trial with no event time is never forgotten)."""
    return facts.finished_at is None or facts.finished_at >= b.window_cutoff


def stopped_at(
    facts: TrialFacts, table: AggregateTable | None, b: Bounds
) -> tuple[Stage, str] | None:
    """The first stage a trial did not reach, and why; None when it reached them all.
    A verdict assembled without a gate result or a judge's verdict (an `error` after the
    verdict's wait) does not account for the stage that never answered."""
    if not facts.gated:
        return "gate", "no gate result" + (
            f" (its verdict: {facts.verdict_outcome} after the wait)"
            if facts.verdict_attempt is not None
            else ""
        )
    missing = sorted(facts.expected_judges - facts.judges)
    if missing:
        return "judge", f"no verdict of judge {', '.join(missing)}"
    if facts.verdict_attempt is None:
        return "verdict", "gate result and judge verdicts present, no trial verdict"
    if facts.projected_event_id != facts.verdict_event_id:
        found = facts.projected_event_id or "no row"
        return "projection", f"projection holds {found}, newest verdict {facts.verdict_event_id}"
    if table is None or not remembered_until(facts, b):
        return None
    memory = table.trial(facts.scenario_id, facts.trial_id)
    if memory is None:
        return "aggregate_run", "the aggregate does not remember the trial"
    attempt, outcome, landed = memory
    if attempt < facts.verdict_attempt or outcome != facts.verdict_outcome:
        return (
            "aggregate_run",
            f"counted as {outcome} (attempt {attempt}), verdict "
            f"{facts.verdict_outcome} (attempt {facts.verdict_attempt})",
        )
    if scope_key("run", facts.run_id, None) not in landed:
        return "aggregate_run", "its change to the run's count did not land"
    lost = [w for w in windows_of(facts, b) if w not in landed]
    if lost:
        return "aggregate_window", f"its change to window {', '.join(lost)} did not land"
    return None


# ----------------------------------------------------------------------- scopes


@dataclass
class ScopeTally:
    """The counts every scope should hold, from the newest verdict of each trial."""

    expected: dict[tuple[str, str], Counts] = field(default_factory=dict)
    # (scenario, scope key) -> trials flagged on their own, so a scope they explain
    # needs no entry of its own
    explained: set[tuple[str, str]] = field(default_factory=set)
    # scopes a trial still in flight will change: not compared yet
    skipped: set[tuple[str, str]] = field(default_factory=set)

    def add(self, facts: TrialFacts, b: Bounds) -> None:
        if facts.verdict_outcome is None:
            return
        for key in [scope_key("run", facts.run_id, None), *windows_of(facts, b)]:
            self.expected.setdefault((facts.scenario_id, key), Counts()).add(facts.verdict_outcome)

    def explain(self, facts: TrialFacts, b: Bounds) -> None:
        self.explained.update(_scopes_of(facts, b))

    def busy(self, facts: TrialFacts, b: Bounds) -> None:
        self.skipped.update(_scopes_of(facts, b))


def _scopes_of(facts: TrialFacts, b: Bounds) -> list[tuple[str, str]]:
    return [
        (facts.scenario_id, key)
        for key in [scope_key("run", facts.run_id, None), *windows_of(facts, b)]
    ]


def compare_scopes(
    tally: ScopeTally,
    counted: Iterable[tuple[str, str, int, int, int]],
    b: Bounds,
    *,
    run_id: str | None = None,
    since: float | None = None,
) -> Iterator[ScopeMismatch]:
    """Every scope whose counts differ from its verdicts'. With `run_id`, that run's scopes
    only; with `since`, the windows starting then or later (a run read in part cannot be
    compared); windows the aggregate may have forgotten never."""
    held: dict[tuple[str, str], Counts] = {
        (s, key): Counts(passed=p, failed=f, errors=e) for s, key, p, f, e in counted
    }

    def compared(key: str) -> bool:
        scope, run, start = parse_scope(key)
        if scope == "run":
            return since is None and (run_id is None or run == run_id)
        return (
            run_id is None
            and start is not None
            and start >= b.window_cutoff
            and (since is None or start >= since)
        )

    for pair in sorted(set(tally.expected) | set(held)):
        scenario_id, key = pair
        if pair in tally.skipped or not compared(key):
            continue
        expected = tally.expected.get(pair, Counts())
        got = held.get(pair, Counts())
        if expected != got:
            scope, run, start = parse_scope(key)
            yield ScopeMismatch(
                scenario_id=scenario_id,
                scope=scope,
                run_id=run,
                window_start=start,
                counted=got,
                expected=expected,
            )


def unexplained(mismatches: Iterable[ScopeMismatch], tally: ScopeTally) -> Iterator[Unaccounted]:
    """A scope wrong with none of its trials flagged on its own: the count itself is off."""
    for m in mismatches:
        key = scope_key(m.scope, m.run_id, m.window_start)
        if (m.scenario_id, key) in tally.explained:
            continue
        yield Unaccounted(
            trial_id=None,
            run_id=m.run_id,
            scenario_id=m.scenario_id,
            stopped_at="aggregate_run" if m.scope == "run" else "aggregate_window",
            detail=f"scope {key} counts {m.counted.n} ({_split(m.counted)}), its verdicts "
            f"{m.expected.n} ({_split(m.expected)}); no trial of it is missing "
            "on its own",
        )


def _split(c: Counts) -> str:
    return f"{c.passed} passed, {c.failed} failed, {c.errors} errors"


# ----------------------------------------------------------------------- report


@dataclass
class Audit:
    """Folds trials one at a time (memory: the unaccounted ones and the scope tally)."""

    bounds: Bounds
    table: AggregateTable | None
    trials: int = 0
    in_flight: int = 0
    reached: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REACHED, 0))
    dead_lettered: dict[str, int] = field(default_factory=dict)
    unaccounted: list[Unaccounted] = field(default_factory=list)
    by_stage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    tally: ScopeTally = field(default_factory=ScopeTally)

    def add(self, facts: TrialFacts) -> None:
        self.trials += 1
        self.tally.add(facts, self.bounds)
        if facts.verdict_attempt is None and facts.dead_letter is not None:
            self.dead_lettered[facts.dead_letter] = self.dead_lettered.get(facts.dead_letter, 0) + 1
            return
        stop = stopped_at(facts, self.table, self.bounds)
        reached = STAGES.index(stop[0]) if stop else len(STAGES)
        for name, past in _REACHED_PAST.items():
            if reached > past:
                self.reached[name] += 1
        if stop is None:
            return
        if facts.logged_at > self.bounds.now - self.bounds.grace_s:
            # Its deadlines have not passed: the pipeline may still be on it, and the
            # scopes it will change are not compared yet.
            self.in_flight += 1
            self.tally.busy(facts, self.bounds)
            return
        if stop[0] in ("aggregate_run", "aggregate_window"):
            # its missing count is what makes its scopes differ: no entry of their own
            self.tally.explain(facts, self.bounds)
        self.by_stage[stop[0]] += 1
        if len(self.unaccounted) < LISTED:
            self.unaccounted.append(
                Unaccounted(
                    trial_id=facts.trial_id,
                    run_id=facts.run_id,
                    scenario_id=facts.scenario_id,
                    stopped_at=stop[0],
                    detail=stop[1],
                )
            )

    def report(self, *, run_id: str | None = None, since: float | None = None) -> AuditReport:
        counted = list(self.table.scopes()) if self.table is not None else []
        mismatches = (
            list(compare_scopes(self.tally, counted, self.bounds, run_id=run_id, since=since))
            if self.table is not None
            else []
        )
        counts = list(unexplained(mismatches, self.tally))
        by_stage = dict(self.by_stage)
        for entry in counts:
            by_stage[entry.stopped_at] += 1
        return AuditReport(
            clean=not any(by_stage.values()) and not mismatches,
            trials=self.trials,
            stages=dict(self.reached),
            in_flight=self.in_flight,
            dead_lettered=dict(sorted(self.dead_lettered.items())),
            unaccounted_by_stage=by_stage,
            unaccounted=[*self.unaccounted, *counts],
            scopes=mismatches,
        )
