"""The audit's reconciliation, trial by trial and scope by scope, on hand-made facts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.audit.domain import Audit, Bounds, Counts, TrialFacts, bounds, stopped_at
from services.grading.windows import parse_windows

HOUR = 3600
NOW = 1_000 * 86400.0  # a day boundary: the 1h and 1d windows of NOW - 10 min are known
SIZES = parse_windows("1h,1d")


def b(grace: float = 0.0) -> Bounds:
    return bounds(
        SIZES,
        now=NOW,
        retention_s=7 * 86400,
        max_skew_s=300,
        grace_s=grace,
        newest_finished=NOW - 60,
    )


def done(
    trial: str = "t1",
    outcome: str = "passed",
    run: str = "r",
    scenario: str = "s",
    at: float = NOW - 600,
) -> TrialFacts:
    """A trial that reached every stage before the aggregate."""
    return TrialFacts(
        trial_id=trial,
        run_id=run,
        scenario_id=scenario,
        finished_at=at,
        logged_at=at,
        gated=True,
        judges=frozenset({"j"}),
        expected_judges=frozenset({"j"}),
        verdict_attempt=1,
        verdict_outcome=outcome,
        verdict_event_id=f"v:{trial}:1",
        verdict_logged_at=at + 1,
        verdict_finished_at=at,
        projected_event_id=f"v:{trial}:1",
    )


class Table:
    """The aggregate's table as the audit reads it, made by hand."""

    def __init__(self) -> None:
        self.trials: dict[tuple[str, str], tuple[int, str, frozenset[str]]] = {}
        self.counts: dict[tuple[str, str], Counts] = {}

    def count(self, f: TrialFacts, *, skip: str | None = None) -> None:
        hour, day = (int(f.finished_at // s) * s for s in (HOUR, 86400))  # type: ignore[operator]
        scopes = [f"run:{f.run_id}", f"1h:{hour}", f"1d:{day}"]
        landed = frozenset(s for s in scopes if s != skip)
        self.trials[(f.scenario_id, f.trial_id)] = (
            f.verdict_attempt or 1,
            f.verdict_outcome or "",
            landed,
        )
        for scope in landed:
            self.counts.setdefault((f.scenario_id, scope), Counts()).add(f.verdict_outcome or "")

    def trial(self, scenario_id: str, trial_id: str) -> tuple[int, str, frozenset[str]] | None:
        return self.trials.get((scenario_id, trial_id))

    def scopes(self):  # type: ignore[no-untyped-def]
        for (scenario, scope), c in self.counts.items():
            yield scenario, scope, c.passed, c.failed, c.errors


@pytest.mark.parametrize(
    ("change", "stage"),
    [
        ({"gated": False, "verdict_attempt": None}, "gate"),
        ({"gated": False}, "gate"),  # graded `error` after the verdict's wait: still the gate's
        ({"judges": frozenset()}, "judge"),
        ({"verdict_attempt": None, "verdict_outcome": None, "verdict_event_id": None}, "verdict"),
        ({"projected_event_id": None}, "projection"),
        ({"projected_event_id": "v:t1:0"}, "projection"),  # the row holds an older attempt
    ],
)
def test_the_first_stage_not_reached(change: dict, stage: str) -> None:
    facts = replace(done(), **change)
    found = stopped_at(facts, Table(), b())
    assert found is not None and found[0] == stage


def test_a_trial_counted_everywhere_is_accounted_for() -> None:
    table = Table()
    table.count(done())
    assert stopped_at(done(), table, b()) is None


def test_aggregate_stages() -> None:
    facts = done()
    assert stopped_at(facts, Table(), b())[0] == "aggregate_run"  # type: ignore[index]
    skipped_window = Table()
    skipped_window.count(facts, skip=f"1h:{int(facts.finished_at // HOUR) * HOUR}")  # type: ignore[operator]
    found = stopped_at(facts, skipped_window, b())
    assert found is not None and found[0] == "aggregate_window"
    regraded = replace(facts, verdict_attempt=2, verdict_outcome="failed")
    counted_old = Table()
    counted_old.count(facts)
    assert stopped_at(regraded, counted_old, b())[0] == "aggregate_run"  # type: ignore[index]


def test_a_verdict_without_event_time_counts_in_its_run_only() -> None:
    # assembled without its gate result (an error after the wait): no finished_at
    facts = replace(done(outcome="error"), verdict_finished_at=None)
    table = Table()
    table.trials[("s", "t1")] = (1, "error", frozenset({"run:r"}))
    table.counts[("s", "run:r")] = Counts(errors=1)
    assert stopped_at(facts, table, b()) is None
    audit = Audit(b(), table)
    audit.add(facts)
    assert audit.report().clean


def test_windows_older_than_the_retention_are_not_expected() -> None:
    old = replace(done(at=NOW - 8 * 86400), verdict_finished_at=NOW - 8 * 86400)
    table = Table()
    # the aggregate forgot the trial and its windows: nothing to flag
    assert stopped_at(old, table, b()) is None


def test_report_counts_stages_and_scopes() -> None:
    table = Table()
    trials = [done(f"t{i}", "passed" if i % 3 else "failed") for i in range(9)]
    for f in trials[:8]:
        table.count(f)
    audit = Audit(b(), table)
    for f in trials:
        audit.add(f)
    report = audit.report()
    assert not report.clean
    assert report.trials == 9
    assert report.stages == {
        "finished": 9,
        "gated": 9,
        "judged": 9,
        "verdict": 9,
        "projected": 9,
        "aggregated": 8,
    }
    assert [(u.trial_id, u.stopped_at) for u in report.unaccounted] == [("t8", "aggregate_run")]
    # t8 is missing from its run and both windows: three scopes, explained by t8 alone
    assert len(report.scopes) == 3
    assert {s.scope for s in report.scopes} == {"run", "1h", "1d"}
    assert all(s.expected.n == s.counted.n + 1 for s in report.scopes)


def test_a_count_wrong_with_no_trial_missing_is_reported_without_a_trial() -> None:
    table = Table()
    trials = [done(f"t{i}") for i in range(4)]
    for f in trials:
        table.count(f)
    hour = int(trials[0].finished_at // HOUR) * HOUR  # type: ignore[operator]
    table.counts[("s", f"1h:{hour}")].passed += 3  # a bucket written wrong
    audit = Audit(b(), table)
    for f in trials:
        audit.add(f)
    report = audit.report()
    assert [(u.trial_id, u.stopped_at) for u in report.unaccounted] == [(None, "aggregate_window")]
    (scope,) = report.scopes
    assert (scope.scope, scope.window_start, scope.counted.passed, scope.expected.passed) == (
        "1h",
        hour,
        7,
        4,
    )


def test_young_trials_are_in_flight_and_their_scopes_wait() -> None:
    young = replace(
        done(at=NOW - 5),
        verdict_attempt=None,
        verdict_outcome=None,
        verdict_event_id=None,
        projected_event_id=None,
    )
    audit = Audit(b(grace=60), Table())
    audit.add(young)
    report = audit.report()
    assert report.clean and report.in_flight == 1


def test_a_dead_lettered_trial_is_accounted_for() -> None:
    lost = replace(
        done(),
        gated=False,
        judges=frozenset(),
        verdict_attempt=None,
        verdict_outcome=None,
        verdict_event_id=None,
        projected_event_id=None,
        dead_letter="unknown_scenario",
    )
    audit = Audit(b(), Table())
    audit.add(lost)
    report = audit.report()
    assert report.clean and report.dead_lettered == {"unknown_scenario": 1}


def test_run_and_since_limit_which_scopes_are_compared() -> None:
    table = Table()
    f = done()
    audit = Audit(b(), table)  # the aggregate counted nothing
    audit.add(f)
    scopes = {s.scope for s in audit.report().scopes}
    assert scopes == {"run", "1h", "1d"}
    assert {s.scope for s in audit.report(run_id="r").scopes} == {"run"}
    assert {s.scope for s in audit.report(run_id="other").scopes} == set()
    # since: windows wholly after it only, and no run (read in part)
    since = NOW - 3 * HOUR
    assert {s.scope for s in audit.report(since=since).scopes} == {"1h"}


def test_every_lost_trial_is_counted_and_the_first_ones_listed() -> None:
    from services.audit import domain

    audit = Audit(b(), Table())
    for i in range(domain.LISTED + 5):
        audit.add(replace(done(f"t{i:06d}"), projected_event_id=None))
    report = audit.report(run_id="nothing")  # no scope of this run: trials only
    assert report.unaccounted_by_stage["projection"] == domain.LISTED + 5
    assert len(report.unaccounted) == domain.LISTED
    assert not report.clean
