"""A run's report and its deploy-gate decision, built from the projection's trial rows.

Pure functions: no database, no console. The per-scenario figures come from the same
`summarize` the sink uses for its summary table (ReliabilityTally underneath), so the
report and the stored summaries cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median
from typing import Any

from pydantic import BaseModel

from schemas.events import ExternalCheckResult, FailedCheck, ReliabilityFigures
from services.grading.adaptive import DEFAULT_CREDIBILITY, Observed, fixed_plan_trials, standing
from services.grading.estimators import ReliabilityTally, pass_hat_k_interval
from services.report.flakiness import ScenarioFlakiness, TrialChecks, explain_flakiness
from services.report.judge_cost import (
    JudgeCostSummary,
    Prices,
    sampling_saved,
    summarize_costs,
    trial_costs,
)
from services.storage.records import JudgeRecord, TrialRecord, summarize

# The CLI's exit codes (services/contract/exits.py): no trials is "nothing to judge".
EXIT_PASS, EXIT_FAIL, EXIT_NOTHING_TO_GATE = 0, 1, 3


class ScenarioReport(ReliabilityFigures):
    scenario_id: str
    scenario_passed: bool
    # The 90% credible interval of pass^k (Beta posterior on the per-trial pass rate).
    pass_hat_k_lower: float = 0.0
    pass_hat_k_upper: float = 1.0
    completion: str = "product"  # conversation: graded without a state gate
    # The scenario versions (content hashes) its trials were graded against: one, unless
    # the scenario changed during the run.
    scenario_versions: list[str] = []
    # Tracked, never gating: medians over the trials that reported them.
    tokens_median: float | None = None
    turns_median: float | None = None
    duration_s_median: float | None = None
    # Production traffic under sampling (docs/production.md): the trials whose every check
    # ran (none of their LLM judges `not_sampled`; every trial without sampling) and pass^k
    # over them, with its 90% credible interval; and what the sample saved: the LLM judge
    # calls not made, their tokens and cost estimated from the same judges' answered calls
    # in the run (None: not estimable, or no prices set).
    n_sampled: int = 0
    passed_sampled: int = 0
    errors_sampled: int = 0
    pass_hat_k_sampled: float | None = None
    pass_hat_k_sampled_lower: float = 0.0
    pass_hat_k_sampled_upper: float = 1.0
    judge_calls_saved: int = 0
    judge_tokens_saved_estimate: int | None = 0
    judge_cost_saved_estimate: float | None = None

    @property
    def insufficient(self) -> bool:
        return self.n < self.k

    @property
    def sampled(self) -> bool:
        """Whether the LLM-judge sample left some of its trials out."""
        return self.n_sampled < self.n


class TrialLine(TrialChecks):
    trial_id: str
    exit_reason: str | None = None
    exit_source: str | None = None  # session | harness: whose exit the exit gate checked
    completion: str = "product"
    tokens: int | None = None
    turns: int | None = None
    duration_s: float | None = None
    checks_passed: list[str] = []
    # External checks the scenario does not name: shown, never counted.
    advisory_checks: list[ExternalCheckResult] = []
    # Judging this trial: model calls, the tokens they spent, the estimated cost (None
    # without prices), and the LLM judges skipped because the gates had failed it.
    judge_calls: int = 0
    judge_input_tokens: int = 0
    judge_output_tokens: int = 0
    judge_cost: float | None = None
    skipped_judges: list[str] = []
    # LLM judges not run: a production trial outside its scenario's sample.
    not_sampled_judges: list[str] = []


class CheckFailures(BaseModel):
    """How often one check failed across a run: counted once per trial it failed in."""

    check: str
    failures: int
    share: float  # of the run's trials
    example_reason: str
    scenarios: list[str]


class AdvisoryJudge(BaseModel):
    """A judge that was recorded but could not fail a trial, and why."""

    judge_id: str
    scenarios: list[str]
    verdicts: int
    failed: int  # verdicts that would have failed the trial had the judge been gating
    why: str
    example_reason: str | None = None  # of its first failed verdict


class AdvisoryCheck(BaseModel):
    """An external check reported by the run's conversations that their scenario does not
    name in `external_checks`: recorded and shown, never failing a trial."""

    check: str  # external:<id>
    scenarios: list[str]
    trials: int  # trials that reported it
    failed: int  # of those, the ones in which it failed
    example_reason: str | None = None  # of its first failure, in trial order


class InvalidTrial(BaseModel):
    """A trial whose simulated user failed a user check: neither passed nor failed."""

    trial_id: str
    scenario_id: str
    checks: list[FailedCheck]


class FixedPlanComparison(BaseModel):
    trials_run: int
    fixed_plan_trials: int
    # The mass of the intervals compared. The projection does not record the credibility
    # an adaptive run used (`--credibility`), so the report compares at the default and
    # says so; `passk run --adaptive --json` compares at the run's own.
    credibility: float = DEFAULT_CREDIBILITY

    @property
    def ratio(self) -> float:
        return self.trials_run / self.fixed_plan_trials if self.fixed_plan_trials else 0.0

    def text(self) -> str:
        share = f" ({self.ratio:.0%} of it)" if self.fixed_plan_trials else ""
        return (
            f"adaptive run: {self.trials_run} trials; a fixed plan (the same n for every "
            f"scenario) reaching the same widths of {self.credibility:.0%} intervals would "
            f"have run {self.fixed_plan_trials}{share}"
        )


def invalid_trials(lines: Sequence[TrialLine]) -> list[InvalidTrial]:
    return [
        InvalidTrial(
            trial_id=t.trial_id,
            scenario_id=t.scenario_id,
            checks=[c for c in t.failed_checks if c.check.startswith("user:")],
        )
        for t in lines
        if t.outcome == "invalid"
    ]


def planned_by_passk_run(run_id: str, trials: Sequence[TrialLine]) -> bool:
    """Every trial id is one `passk run` plans (`<run_id>:<scenario_id>:<NNN>`): not
    production traffic, a replay or an import, whose counts per scenario are whatever came."""
    return bool(trials) and all(
        t.trial_id.startswith(f"{run_id}:{t.scenario_id}:")
        and t.trial_id.rsplit(":", 1)[1].isdigit()
        for t in trials
    )


def fixed_plan_comparison(scenarios: Sequence[ScenarioReport]) -> FixedPlanComparison | None:
    """None for a run that was a fixed plan: every scenario ran max(T, k) trials for one
    T (what `passk run --trials T` does). Otherwise (an adaptive run) the trials it ran
    and those a fixed plan reaching each scenario's interval width would have run."""
    ran = {s.scenario_id: s.n + s.invalid for s in scenarios}  # errors are in n
    if not scenarios or any(
        all(ran[s.scenario_id] == max(t, s.k) for s in scenarios) for t in set(ran.values())
    ):
        return None
    standings = [
        standing(
            Observed(
                s.scenario_id,
                k=s.k,
                goal=0.0,
                trials=ran[s.scenario_id],
                passed=s.passed,
                failed=s.failed,
                errors=s.errors,
                invalid=s.invalid,
            ),
            DEFAULT_CREDIBILITY,
        )
        for s in scenarios
    ]
    return FixedPlanComparison(
        trials_run=sum(ran.values()),
        fixed_plan_trials=fixed_plan_trials(standings, DEFAULT_CREDIBILITY),
        credibility=DEFAULT_CREDIBILITY,
    )


class RunReport(BaseModel):
    run_id: str
    scenarios: list[ScenarioReport]
    trials: list[TrialLine]
    failing_checks: list[CheckFailures]
    flakiness: list[ScenarioFlakiness] = []
    previous_run: str | None = None  # the latest earlier run of the same scenarios
    advisory_judges: list[AdvisoryJudge] = []
    advisory_checks: list[AdvisoryCheck] = []
    judge_cost: JudgeCostSummary | None = None
    # Trials a simulated user spoiled (a user check failed): out of every figure above.
    invalid_trials: list[InvalidTrial] = []
    # A run whose scenarios got unequal trials (an adaptive run): what a fixed plan
    # reaching the same interval widths would have run.
    fixed_plan: FixedPlanComparison | None = None

    @property
    def without_state_gate(self) -> list[str]:
        """Scenarios graded without a state gate (`completion: conversation`)."""
        return [s.scenario_id for s in self.scenarios if s.completion == "conversation"]


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(median(known)) if known else None


def trial_line(t: TrialRecord) -> TrialLine:
    metrics = t.metrics or {}
    tokens = [metrics.get("input_tokens"), metrics.get("output_tokens")]
    duration_ms = metrics.get("duration_ms")
    return TrialLine(
        trial_id=t.trial_id,
        scenario_id=t.scenario_id,
        outcome=t.outcome,
        failed_checks=[FailedCheck.model_validate(fc) for fc in t.failed_checks],
        exit_reason=t.exit_reason,
        exit_source=t.exit_source,
        completion=t.completion,
        tokens=sum(x for x in tokens if x is not None)
        if any(x is not None for x in tokens)
        else None,
        turns=metrics.get("turns"),
        duration_s=duration_ms / 1000 if duration_ms is not None else None,
        checks_passed=list(t.checks_passed),
        advisory_checks=[ExternalCheckResult.model_validate(c) for c in t.advisory_checks],
    )


def scenario_report(
    run_id: str,
    scenario_id: str,
    trials: Sequence[TrialRecord],
    lines: Sequence[TrialLine],
    judges: Sequence[JudgeRecord] = (),
    prices: Prices = Prices(),
) -> ScenarioReport:
    summary = summarize(run_id, scenario_id, trials)
    mine = [t for t in lines if t.scenario_id == scenario_id]
    lower, upper = pass_hat_k_interval(summary.n, summary.passed, summary.k)
    sampled = ReliabilityTally(k=summary.k)
    for t in mine:
        if not t.not_sampled_judges and t.outcome != "invalid":
            sampled.add(t.outcome)
    s_lower, s_upper = pass_hat_k_interval(sampled.n, sampled.passed, sampled.k)
    saved = sampling_saved([t.trial_id for t in mine], judges, prices)
    return ScenarioReport(
        **summary.model_dump(include=set(ScenarioReport.model_fields)),
        pass_hat_k_lower=lower,
        pass_hat_k_upper=upper,
        completion="conversation"
        if any(t.completion == "conversation" for t in mine)
        else "product",
        scenario_versions=sorted(
            {
                t.scenario_version
                for t in trials
                if t.scenario_id == scenario_id and t.run_id == run_id
            }
        ),
        tokens_median=_median([t.tokens for t in mine]),
        turns_median=_median([t.turns for t in mine]),
        duration_s_median=_median([t.duration_s for t in mine]),
        n_sampled=sampled.n,
        passed_sampled=sampled.passed,
        errors_sampled=sampled.errors,
        pass_hat_k_sampled=sampled.pass_hat_k,
        pass_hat_k_sampled_lower=s_lower,
        pass_hat_k_sampled_upper=s_upper,
        judge_calls_saved=saved.calls,
        judge_tokens_saved_estimate=saved.tokens_estimate,
        judge_cost_saved_estimate=saved.cost_estimate,
    )


def advisory_judges(
    trials: Sequence[TrialRecord], judges: Sequence[JudgeRecord]
) -> list[AdvisoryJudge]:
    """Each judge that could not fail trials of the run, with why and how often it failed.

    The verdict records, per trial, which judges were advisory and why (`gating: false` in
    the scenario, uncalibrated, below the bar, ...), as decided when it was graded; a trial
    graded before verdicts recorded that falls back to the judge verdicts' `gating` flag."""
    # judge -> (scenario, why, result, reason) of each of its advisory verdicts
    found: dict[str, list[tuple[str, str, str, str]]] = {}
    recorded = {t.trial_id for t in trials if t.gating_judges or t.advisory_judges}
    for t in trials:
        for a in t.advisory_judges:
            found.setdefault(a["judge_id"], []).append(
                (t.scenario_id, a["why"], a["result"], a["reason"])
            )
    for v in judges:
        if not v.gating and v.trial_id not in recorded:
            found.setdefault(v.judge_id, []).append(
                (v.scenario_id, "declared gating: false in the scenario", v.result, v.reason)
            )
    out = []
    for judge_id, seen in sorted(found.items()):
        failed = [reason for _, _, result, reason in seen if result == "failed"]
        out.append(AdvisoryJudge(
            judge_id=judge_id,
            scenarios=sorted({scenario for scenario, _, _, _ in seen}),
            verdicts=len(seen),
            failed=len(failed),
            why="; ".join(dict.fromkeys(why for _, why, _, _ in seen)),
            example_reason=failed[0] if failed else None,
        ))  # fmt: skip
    return out


def not_counted(what: str, failed: int, trials: int, example_reason: str | None) -> str:
    """The report's line for something advisory: how often it failed, and an example."""
    said = f"; e.g. {example_reason}" if example_reason else ""
    return f"advisory {what}: failed {failed} of {trials} trials, not counted{said}"


def advisory_text(judge: AdvisoryJudge) -> str:
    return not_counted(
        f"judge {judge.judge_id} ({judge.why})", judge.failed, judge.verdicts, judge.example_reason
    )


def advisory_checks(trials: Sequence[TrialLine]) -> list[AdvisoryCheck]:
    """Each advisory external check of the run, with how often it failed (by check)."""
    seen: dict[str, list[tuple[str, ExternalCheckResult]]] = {}
    for t in trials:
        for c in t.advisory_checks:
            seen.setdefault(c.check, []).append((t.scenario_id, c))
    out = []
    for check, found in sorted(seen.items()):
        failed = [c.reason for _, c in found if not c.passed]
        out.append(AdvisoryCheck(
            check=check, scenarios=sorted({scenario for scenario, _ in found}),
            trials=len(found), failed=len(failed), example_reason=failed[0] if failed else None,
        ))  # fmt: skip
    return out


def advisory_check_text(check: AdvisoryCheck) -> str:
    return not_counted(
        f"check {check.check} (not in the scenario's external_checks)",
        check.failed,
        check.trials,
        check.example_reason,
    )


def build_report(
    run_id: str,
    trials: Sequence[TrialRecord],
    previous_run: str | None = None,
    judges: Sequence[JudgeRecord] = (),
    prices: Prices = Prices(),
) -> RunReport:
    trials = sorted(
        (t for t in trials if t.run_id == run_id), key=lambda t: (t.scenario_id, t.trial_id)
    )
    lines = [trial_line(t) for t in trials]
    run_judges = [j for j in judges if j.run_id == run_id]
    costs = trial_costs(run_judges, prices)
    for line in lines:
        c = costs.get(line.trial_id)
        if c is not None:
            line.judge_calls, line.judge_cost, line.skipped_judges = c.calls, c.cost, c.skipped
            line.not_sampled_judges = c.not_sampled
            line.judge_input_tokens, line.judge_output_tokens = c.input_tokens, c.output_tokens
    scenarios = [
        scenario_report(run_id, sid, trials, lines, run_judges, prices)
        for sid in sorted({t.scenario_id for t in trials})
    ]
    return RunReport(
        run_id=run_id,
        scenarios=scenarios,
        trials=lines,
        # A trial the simulated user spoiled says nothing of the agent's checks.
        failing_checks=rank_failing_checks([t for t in lines if t.outcome != "invalid"]),
        flakiness=explain_flakiness([t for t in lines if t.outcome != "invalid"]),
        previous_run=previous_run,
        advisory_judges=advisory_judges(trials, run_judges),
        advisory_checks=advisory_checks(lines),
        judge_cost=summarize_costs([t.trial_id for t in trials], run_judges, prices)
        if trials
        else None,
        invalid_trials=invalid_trials(lines),
        # Only a run passk planned has a plan to compare with (not production traffic).
        fixed_plan=fixed_plan_comparison(scenarios)
        if planned_by_passk_run(run_id, lines)
        else None,
    )


def previous_run(run_id: str, runs: Sequence[tuple[str, str, Any]]) -> str | None:
    """The latest run before `run_id` over exactly the same scenarios, from
    (run_id, scenario_id, last verdict time) rows; runs are ordered by their last verdict."""
    scenarios: dict[str, set[str]] = {}
    ended: dict[str, Any] = {}
    for run, scenario, at in runs:
        scenarios.setdefault(run, set()).add(scenario)
        if at is not None and (run not in ended or at > ended[run]):
            ended[run] = at
    if run_id not in ended:
        return None
    earlier = [
        r
        for r in scenarios
        if r != run_id
        and scenarios[r] == scenarios[run_id]
        and r in ended
        and ended[r] < ended[run_id]
    ]
    return max(earlier, key=lambda r: (ended[r], r)) if earlier else None


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


SCENARIO_KEYS = (
    "scenario_id",
    "k",
    "n",
    "passed",
    "failed",
    "errors",
    "pass_at_k",
    "pass_hat_k",
    "scenario_passed",
)
TRIAL_KEYS = ("trial_id", "scenario_id", "outcome", "failed_checks")


def _documented_first(row: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    return {**{k: row[k] for k in keys}, **{k: v for k, v in row.items() if k not in keys}}


def report_json(report: RunReport) -> dict[str, Any]:
    """The shape DESIGN.md promises for `passk report --json`, with more fields beside:
    credible bounds, tracked costs, whose exit was checked, flakiness, the previous run."""
    return {
        "run_id": report.run_id,
        "scenarios": [_documented_first(s.model_dump(), SCENARIO_KEYS) for s in report.scenarios],
        "trials": [_documented_first(t.model_dump(), TRIAL_KEYS) for t in report.trials],
        "previous_run": report.previous_run,
        "without_state_gate": report.without_state_gate,
        "flakiness": [
            {
                "scenario_id": f.scenario_id,
                "trials": f.trials,
                "passed": f.passed,
                "checks": [c.model_dump() for c in f.checks],
            }
            for f in report.flakiness
        ],
        "advisory_judges": [j.model_dump() for j in report.advisory_judges],
        "advisory_checks": [c.model_dump() for c in report.advisory_checks],
        "judge_cost": report.judge_cost.model_dump() if report.judge_cost else None,
        "invalid_trials": [t.model_dump() for t in report.invalid_trials],
        "fixed_plan": None
        if report.fixed_plan is None
        else {**report.fixed_plan.model_dump(), "ratio": report.fixed_plan.ratio},
    }


class ScenarioFailure(BaseModel):
    scenario_id: str
    why: str


class GateDecision(BaseModel):
    exit_code: int
    passed: list[str]
    failures: list[ScenarioFailure]
    message: str
    # advisory judges and external checks and their failures, apart from the failures
    advisory: list[str] = []


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
    advisory = [advisory_text(j) for j in report.advisory_judges] + [
        advisory_check_text(c) for c in report.advisory_checks
    ]
    if failures:
        return GateDecision(
            exit_code=EXIT_FAIL,
            passed=passed,
            failures=failures,
            advisory=advisory,
            message=f"deploy gate FAILED for run {report.run_id!r}: {len(failures)} problem(s); "
            f"{len(passed)} of {len(report.scenarios)} scenarios passed",
        )
    return GateDecision(
        exit_code=EXIT_PASS,
        passed=passed,
        failures=[],
        advisory=advisory,
        message=f"deploy gate passed for run {report.run_id!r}: "
        f"all {len(passed)} scenarios passed pass^k",
    )
