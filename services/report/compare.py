"""Two runs side by side: did this build get less reliable than the last one?

Pure functions over two `RunReport`s. A scenario has *regressed* only when the new run is
confidently worse: the upper credible bound of its pass^k lies below the base run's
lower bound, so the two intervals do not even touch. Overlapping intervals are noise at
these trial counts, however the point estimates moved. Tokens, turns and duration are
compared as medians to spot cost drift; they never make a regression.
"""

from __future__ import annotations

from pydantic import BaseModel, computed_field

from services.grading.estimators import pass_hat_k_median
from services.report.domain import RunReport, ScenarioReport


class RunFigures(BaseModel):
    """One scenario in one run, as the comparison shows it."""

    k: int
    n: int
    passed: int
    pass_hat_k: float | None
    pass_hat_k_lower: float
    pass_hat_k_upper: float
    tokens_median: float | None
    turns_median: float | None
    duration_s_median: float | None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pass_hat_k_median(self) -> float:
        """The posterior median of pass^k: what is shown beside the interval (it always
        lies in it; the unbiased pass_hat_k need not)."""
        return pass_hat_k_median(self.n, self.passed, self.k)

    @classmethod
    def of(cls, scenario: ScenarioReport) -> RunFigures:
        return cls.model_validate(scenario.model_dump(include=set(cls.model_fields)))


class ScenarioChange(BaseModel):
    scenario_id: str
    base: RunFigures | None  # None: the scenario is new in the run
    run: RunFigures | None  # None: the run no longer has it
    change: float | None  # run pass^k minus base pass^k, when both are estimated
    regression: bool


class CheckChange(BaseModel):
    """How many trials one check failed in each run (gates, judges, external:<id>), to
    say what moved; shown beside the figures, never a regression by itself."""

    check: str
    base_failures: int
    run_failures: int
    base_share: float  # of the base run's trials
    run_share: float  # of the run's trials


class Comparison(BaseModel):
    base_run: str
    run: str
    scenarios: list[ScenarioChange]
    checks: list[CheckChange] = []

    @property
    def regressions(self) -> list[str]:
        return [s.scenario_id for s in self.scenarios if s.regression]


def is_regression(base: RunFigures, run: RunFigures) -> bool:
    """Confidently worse: the new run's upper bound below the base's lower bound."""
    return run.pass_hat_k_upper < base.pass_hat_k_lower


def compare_scenario(
    scenario_id: str, base: ScenarioReport | None, run: ScenarioReport | None
) -> ScenarioChange:
    before = RunFigures.of(base) if base else None
    after = RunFigures.of(run) if run else None
    change = None
    if before and after and before.pass_hat_k is not None and after.pass_hat_k is not None:
        change = after.pass_hat_k - before.pass_hat_k
    return ScenarioChange(
        scenario_id=scenario_id,
        base=before,
        run=after,
        change=change,
        regression=bool(before and after and is_regression(before, after)),
    )


def compare_checks(base: RunReport, run: RunReport) -> list[CheckChange]:
    """Every check that failed in either run, most added failures first (ties by name)."""
    before = {c.check: c for c in base.failing_checks}
    after = {c.check: c for c in run.failing_checks}
    changes = [
        CheckChange(
            check=check,
            base_failures=before[check].failures if check in before else 0,
            run_failures=after[check].failures if check in after else 0,
            base_share=before[check].share if check in before else 0.0,
            run_share=after[check].share if check in after else 0.0,
        )
        for check in before.keys() | after.keys()
    ]
    return sorted(changes, key=lambda c: (-(c.run_share - c.base_share), c.check))


def compare_runs(base: RunReport, run: RunReport) -> Comparison:
    before = {s.scenario_id: s for s in base.scenarios}
    after = {s.scenario_id: s for s in run.scenarios}
    return Comparison(
        base_run=base.run_id,
        run=run.run_id,
        scenarios=[
            compare_scenario(sid, before.get(sid), after.get(sid))
            for sid in sorted(before.keys() | after.keys())
        ],
        checks=compare_checks(base, run),
    )
