"""Adaptive trial allocation (DESIGN.md, "Adaptive trials and simulator checks"): where the
next trials of a run go, as a pure function of the verdicts so far. No I/O here;
`services.harness.adaptive_run` (`passk run --adaptive`) waits for the verdicts and runs the trials.

Per scenario, the interval is the equal-tailed credible interval at `credibility` of p**k
under Beta(c+1, n-c+1), n and c over the *judged* trials (errors and invalid trials out).
A scenario is `above` when its lower bound is above the goal, `below` when its upper bound
is below it, else `undecided`; one with fewer than k judged trials is `undecided` whatever
its bounds (a scenario passes only after k trials), so trials lost to errors or to a
simulated user that broke role are run again while budget remains.

Every scenario first gets its initial trials (k, or more with --trials); then each round
gives at most `batch` trials (default: one per undecided scenario) to the undecided
scenarios, widest interval first (ties: scenario id), one each in that order and round
again while the batch lasts; never past the budget, which counts every trial of the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import floor
from typing import Literal

from services.grading.estimators import pass_hat_k, pass_hat_k_interval

Decision = Literal["above", "below", "undecided"]
ABOVE: Decision = "above"
BELOW: Decision = "below"
UNDECIDED: Decision = "undecided"
DEFAULT_CREDIBILITY = 0.9


@dataclass(frozen=True)
class Observed:
    """One scenario of the run so far: its trials in the log and their verdicts."""

    scenario_id: str
    k: int
    goal: float
    trials: int  # trials of this scenario in the run (whatever their verdict)
    passed: int = 0
    failed: int = 0
    errors: int = 0
    invalid: int = 0
    initial: int = 0  # trials it gets before any round (at least k)

    @property
    def n(self) -> int:
        """Judged trials: errors and invalid trials say nothing about the agent."""
        return self.passed + self.failed


@dataclass(frozen=True)
class Standing:
    """A scenario's interval and decision: what the summary prints, and what the next
    round is allocated from."""

    scenario_id: str
    k: int
    goal: float
    trials: int
    n: int
    passed: int
    failed: int
    errors: int
    invalid: int
    pass_hat_k: float | None
    lower: float
    upper: float
    decision: Decision

    @property
    def width(self) -> float:
        return self.upper - self.lower

    def as_json(self) -> dict[str, object]:
        return {
            "scenario_id": self.scenario_id,
            "n": self.n,
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "invalid": self.invalid,
            "pass_hat_k": self.pass_hat_k,
            "lower": self.lower,
            "upper": self.upper,
            "decision": self.decision,
        }


def decide(
    n: int, c: int, k: int, goal: float, credibility: float = DEFAULT_CREDIBILITY
) -> tuple[float, float, Decision]:
    """(lower, upper, decision) of one scenario with c passes in n judged trials."""
    lower, upper = pass_hat_k_interval(n, c, k, credibility)
    if n < k:
        return lower, upper, UNDECIDED
    if lower > goal:
        return lower, upper, ABOVE
    if upper < goal:
        return lower, upper, BELOW
    return lower, upper, UNDECIDED


def standing(observed: Observed, credibility: float = DEFAULT_CREDIBILITY) -> Standing:
    o = observed
    lower, upper, decision = decide(o.n, o.passed, o.k, o.goal, credibility)
    return Standing(
        scenario_id=o.scenario_id,
        k=o.k,
        goal=o.goal,
        trials=o.trials,
        n=o.n,
        passed=o.passed,
        failed=o.failed,
        errors=o.errors,
        invalid=o.invalid,
        pass_hat_k=pass_hat_k(o.n, o.passed, o.k),
        lower=lower,
        upper=upper,
        decision=decision,
    )


def next_round(
    observed: list[Observed],
    *,
    budget: int,
    credibility: float = DEFAULT_CREDIBILITY,
    batch: int | None = None,
) -> dict[str, int]:
    """How many more trials each scenario gets now ({} when the run is done: every
    scenario decided, or the budget spent). The budget counts every trial of the run,
    those already run included. While a scenario lacks its initial trials the round only
    gives initial trials (fewest first, so a short budget spreads them)."""
    if budget < 0:
        raise ValueError(f"need budget >= 0 (got {budget})")
    if batch is not None and batch < 1:
        raise ValueError(f"need batch >= 1 (got {batch})")
    left = budget - sum(o.trials for o in observed)
    if left <= 0:
        return {}
    short = {
        o.scenario_id: max(o.initial, o.k) - o.trials
        for o in observed
        if o.trials < max(o.initial, o.k)
    }
    if short:
        return _spread(sorted(short, key=lambda s: (-short[s], s)), left, short)
    ranked = sorted(
        (
            standing(o, credibility)
            for o in observed
            if standing(o, credibility).decision == UNDECIDED
        ),
        key=lambda s: (-s.width, s.scenario_id),
    )
    if not ranked:
        return {}
    wanted = len(ranked) if batch is None else batch
    return _spread([s.scenario_id for s in ranked], min(wanted, left), None)


def _spread(order: list[str], count: int, caps: dict[str, int] | None) -> dict[str, int]:
    """`count` trials, one to each scenario in `order` and round again, none past its cap."""
    given: dict[str, int] = {}
    while count > 0:
        before = count
        for scenario_id in order:
            if count == 0:
                break
            if caps is not None and given.get(scenario_id, 0) >= caps[scenario_id]:
                continue
            given[scenario_id] = given.get(scenario_id, 0) + 1
            count -= 1
        if count == before:  # every scenario at its cap
            break
    return given


def fixed_plan_trials(standings: list[Standing], credibility: float = DEFAULT_CREDIBILITY) -> int:
    """Trials a fixed plan (the same n for every scenario) reaching the interval width the
    adaptive run reached for each scenario would need: for each scenario the smallest n
    whose interval, at the pass rate it showed, is no wider than its own; the largest of
    those, for every scenario. A scenario with no judged trial needs none (its width is
    the prior's)."""
    if not standings:
        return 0
    needed = 0
    for s in standings:
        if s.n == 0:
            continue
        rate = s.passed / s.n
        n = s.k
        while n < s.n:
            lower, upper = pass_hat_k_interval(n, floor(rate * n + 0.5), s.k, credibility)
            if upper - lower <= s.width + 1e-12:
                break
            n += 1
        needed = max(needed, max(n, s.k))
    return needed * len(standings)


@dataclass(frozen=True)
class Planned:
    """What the run knows of one scenario before reading verdicts."""

    scenario_id: str
    k: int
    goal: float
    initial: int


def observe(
    scenarios: list[Planned], numbers: dict[str, set[int]], outcomes: dict[str, dict[int, str]]
) -> list[Observed]:
    """Each scenario's trials (`numbers`: the trial numbers of the run in the log) and the
    verdicts they have (`outcomes[scenario_id][number]`: passed, failed, error, invalid)."""
    seen: list[Observed] = []
    for p in scenarios:
        got = outcomes.get(p.scenario_id, {})
        mine = [got[n] for n in sorted(numbers.get(p.scenario_id, set())) if n in got]
        seen.append(
            Observed(
                p.scenario_id,
                k=p.k,
                goal=p.goal,
                trials=len(numbers.get(p.scenario_id, set())),
                passed=mine.count("passed"),
                failed=mine.count("failed"),
                errors=mine.count("error"),
                invalid=mine.count("invalid"),
                initial=p.initial,
            )
        )
    return seen


def next_numbers(used: set[int], count: int) -> list[int]:
    """The next `count` trial numbers of a scenario: the smallest not in the log yet (a
    trial a stopped run never sent is run under its own id), so a re-run names the same
    trials."""
    out: list[int] = []
    n = 1
    while len(out) < count:
        if n not in used:
            out.append(n)
        n += 1
    return out
