"""A run's report and its deploy-gate decision, built from the projection's trial rows.

Pure functions: no database, no console. The per-scenario figures come from the same
`summarize` the sink uses for its summary table (ReliabilityTally underneath), so the
report and the stored summaries cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from schemas.events import FailedCheck
from services.sink.domain import TrialRecord, summarize

EXIT_PASS, EXIT_FAIL, EXIT_NOTHING_TO_GATE = 0, 1, 2


class ScenarioReport(BaseModel):
    scenario_id: str
    k: int
    n: int
    passed: int
    failed: int
    errors: int
    pass_at_k: float | None
    pass_hat_k: float | None
    scenario_passed: bool

    @property
    def insufficient(self) -> bool:
        return self.n < self.k


class TrialLine(BaseModel):
    trial_id: str
    scenario_id: str
    outcome: str
    failed_checks: list[FailedCheck]


class CheckFailures(BaseModel):
    """How often one check failed across a run: counted once per trial it failed in."""

    check: str
    failures: int
    share: float  # of the run's trials
    example_reason: str
    scenarios: list[str]


class RunReport(BaseModel):
    run_id: str
    scenarios: list[ScenarioReport]
    trials: list[TrialLine]
    failing_checks: list[CheckFailures]


def build_report(run_id: str, trials: Sequence[TrialRecord]) -> RunReport:
    trials = sorted(
        (t for t in trials if t.run_id == run_id), key=lambda t: (t.scenario_id, t.trial_id)
    )
    scenarios = [
        ScenarioReport.model_validate(summarize(run_id, sid, trials).model_dump())
        for sid in sorted({t.scenario_id for t in trials})
    ]
    lines = [
        TrialLine(
            trial_id=t.trial_id,
            scenario_id=t.scenario_id,
            outcome=t.outcome,
            failed_checks=[FailedCheck.model_validate(fc) for fc in t.failed_checks],
        )
        for t in trials
    ]
    return RunReport(
        run_id=run_id, scenarios=scenarios, trials=lines, failing_checks=rank_failing_checks(lines)
    )


def rank_failing_checks(trials: Sequence[TrialLine]) -> list[CheckFailures]:
    """Checks by how many trials they failed, most first (ties by name); the example
    reason is the first one in trial order, so the same run always reads the same."""
    seen: dict[str, tuple[int, str, set[str]]] = {}
    for trial in trials:
        for check in dict.fromkeys(fc.check for fc in trial.failed_checks):
            reason = next(fc.reason for fc in trial.failed_checks if fc.check == check)
            count, example, scenarios = seen.get(check, (0, reason, set()))
            seen[check] = (count + 1, example, scenarios | {trial.scenario_id})
    total = len(trials)
    ranked = [
        CheckFailures(
            check=check,
            failures=count,
            share=count / total,
            example_reason=example,
            scenarios=sorted(scenarios),
        )
        for check, (count, example, scenarios) in seen.items()
    ]
    return sorted(ranked, key=lambda c: (-c.failures, c.check))


def report_json(report: RunReport) -> dict[str, Any]:
    """Exactly the shape DESIGN.md promises for `passk report --json`."""
    return {
        "run_id": report.run_id,
        "scenarios": [s.model_dump() for s in report.scenarios],
        "trials": [t.model_dump() for t in report.trials],
    }


class ScenarioFailure(BaseModel):
    scenario_id: str
    why: str


class GateDecision(BaseModel):
    exit_code: int
    passed: list[str]
    failures: list[ScenarioFailure]
    message: str


def _why(scenario: ScenarioReport, trials: Sequence[TrialLine]) -> str:
    if scenario.insufficient:
        return f"insufficient trials: {scenario.n} of k={scenario.k} observed"
    figures = (
        f"pass^k={scenario.pass_hat_k:.3f} ({scenario.passed}/{scenario.n} passed, "
        f"{scenario.failed} failed, {scenario.errors} errors)"
    )
    checks = rank_failing_checks([t for t in trials if t.scenario_id == scenario.scenario_id])
    if not checks:
        return figures
    listed = "; ".join(f"{c.check} x{c.failures}: {c.example_reason}" for c in checks[:3])
    more = f"; and {len(checks) - 3} more" if len(checks) > 3 else ""
    return f"{figures}; failed checks: {listed}{more}"


def gate_decision(report: RunReport, expect_scenarios: int | None = None) -> GateDecision:
    """The deploy gate: pass only when every scenario passed (k trials, all passed) and,
    if asked, at least the expected number of scenarios was observed. No trials at all
    is not a pass either: there was nothing to gate."""
    if not report.trials:
        return GateDecision(
            exit_code=EXIT_NOTHING_TO_GATE,
            passed=[],
            failures=[],
            message=f"run {report.run_id!r} has no trials: nothing to gate",
        )
    failures = [
        ScenarioFailure(scenario_id=s.scenario_id, why=_why(s, report.trials))
        for s in report.scenarios
        if not s.scenario_passed
    ]
    if expect_scenarios is not None and len(report.scenarios) < expect_scenarios:
        failures.append(
            ScenarioFailure(
                scenario_id="(run)",
                why=f"expected {expect_scenarios} scenarios, observed {len(report.scenarios)}",
            )
        )
    passed = [s.scenario_id for s in report.scenarios if s.scenario_passed]
    if failures:
        return GateDecision(
            exit_code=EXIT_FAIL,
            passed=passed,
            failures=failures,
            message=f"deploy gate FAILED for run {report.run_id!r}: {len(failures)} problem(s); "
            f"{len(passed)} of {len(report.scenarios)} scenarios passed",
        )
    return GateDecision(
        exit_code=EXIT_PASS,
        passed=passed,
        failures=[],
        message=f"deploy gate passed for run {report.run_id!r}: "
        f"all {len(passed)} scenarios passed pass^k",
    )
