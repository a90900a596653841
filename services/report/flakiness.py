"""Flakiness explained: which checks make a scenario's trials disagree.

pass@k 1.0 beside pass^k 0.1 says a scenario is flaky; this says why. For each scenario
whose trials did not all end alike, the checks whose result flips between its trials
(failed or errored in some, not in the others), ranked by how many of the scenario's
trials they failed: "judge:captured_follow_up_details fails 2 of 5, gate:exit 1 of 5".
A check that fails in every trial does not flip: it is a steady failure, not flakiness.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from schemas.events import FailedCheck


class TrialChecks(BaseModel):
    """What flakiness needs of a trial: its scenario, its outcome and its failed checks."""

    scenario_id: str
    outcome: str
    failed_checks: list[FailedCheck]


class FlippingCheck(BaseModel):
    check: str
    failures: int  # trials of the scenario in which the check failed or errored
    trials: int  # trials of the scenario
    example_reason: str

    @property
    def summary(self) -> str:
        return f"{self.check} fails {self.failures} of {self.trials}"


class ScenarioFlakiness(BaseModel):
    scenario_id: str
    trials: int
    passed: int
    checks: list[FlippingCheck]  # most failures first

    @property
    def summary(self) -> str:
        """As a person says it: "judge:x fails 2 of 5, gate:exit 1 of 5"."""
        parts = [
            c.summary if i == 0 else f"{c.check} {c.failures} of {c.trials}"
            for i, c in enumerate(self.checks)
        ]
        return ", ".join(parts)


def explain_scenario(scenario_id: str, trials: Sequence[TrialChecks]) -> ScenarioFlakiness | None:
    """The flipping checks of one scenario; None when its trials all ended alike."""
    mine = [t for t in trials if t.scenario_id == scenario_id]
    if len({t.outcome for t in mine}) < 2:
        return None
    counts: dict[str, int] = {}
    examples: dict[str, str] = {}
    for trial in mine:
        for fc in trial.failed_checks:
            if fc.check not in examples:
                examples[fc.check] = fc.reason
        for check in dict.fromkeys(fc.check for fc in trial.failed_checks):
            counts[check] = counts.get(check, 0) + 1
    flipping = [
        FlippingCheck(check=c, failures=n, trials=len(mine), example_reason=examples[c])
        for c, n in counts.items()
        if n < len(mine)
    ]
    flipping.sort(key=lambda c: (-c.failures, c.check))
    return ScenarioFlakiness(
        scenario_id=scenario_id,
        trials=len(mine),
        passed=sum(1 for t in mine if t.outcome == "passed"),
        checks=flipping,
    )


def explain_flakiness(trials: Sequence[TrialChecks]) -> list[ScenarioFlakiness]:
    """Every scenario whose trials disagree, in scenario order."""
    found = (explain_scenario(sid, trials) for sid in sorted({t.scenario_id for t in trials}))
    return [f for f in found if f is not None]
