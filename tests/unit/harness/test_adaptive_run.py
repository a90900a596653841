"""The adaptive loop over a fake pipeline: trials run through `play`, verdicts appear in a
fake projection one poll later (so the loop must wait for them), outcomes fixed per
scenario and trial number."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable

import pytest
import typer
from rich.console import Console
from scipy.stats import beta

from schemas.scenario import Scenario
from services.harness.adaptive_run import AdaptiveOptions, goal_of, run_adaptive
from services.harness.commands import _adaptive_summary
from services.harness.domain import PlannedTrial, RunSummary

RUN = "r:1"  # a run id with a colon, as run ids may have


def scenario(sid: str, k: int = 3, alert: float | None = None) -> Scenario:
    body = {"id": sid, "trials": k, "expected_exit": "product_closed", "user": {"script": ["hi"]}}
    if alert is not None:
        body["alert"] = {"min_pass_hat_k": alert}
    return Scenario.model_validate(body)


class FakePipeline:
    def __init__(self, outcome: Callable[[str, int], str]) -> None:
        self.outcome = outcome
        self.pending: dict[str, str] = {}
        self.projection: dict[str, str] = {}
        self.played: list[str] = []
        self.polls = 0

    async def play(self, todo: list[PlannedTrial]) -> tuple[RunSummary, set[str]]:
        for p in todo:
            self.played.append(p.trial_id)
            self.pending[p.trial_id] = self.outcome(p.scenario.id, p.number)
        return RunSummary(planned=len(todo), run=len(todo), published=len(todo)), {
            p.trial_id for p in todo
        }

    def verdicts(self) -> dict[str, str]:
        # what was pending at the last poll is now projected: verdicts lag one poll
        self.polls += 1
        got = dict(self.projection)
        self.projection.update(self.pending)
        self.pending = {}
        return got


def truth(sid: str, number: int) -> str:
    if sid == "good":
        return "passed"
    if sid == "bad":
        return "failed"
    return "passed" if number % 3 else "failed"  # mid: two of three pass


def run(
    pipeline: FakePipeline,
    scenarios: list[Scenario],
    budget: int,
    *,
    in_log: set[str] | None = None,
    **options: object,
):  # type: ignore[no-untyped-def]
    return asyncio.run(
        run_adaptive(
            run_id=RUN,
            scenarios=scenarios,
            options=AdaptiveOptions(budget=budget, poll_s=0.001, **options),  # type: ignore[arg-type]
            default_goal=0.8,
            in_log=in_log if in_log is not None else set(pipeline.projection),
            play=pipeline.play,
            verdicts=pipeline.verdicts,
        )
    )


SCENARIOS = [scenario("good"), scenario("bad"), scenario("mid")]


def test_decides_far_scenarios_within_budget_and_waits_for_verdicts() -> None:
    pipeline = FakePipeline(truth)
    result = run(pipeline, SCENARIOS, budget=150, goal=0.5)
    by = {s.scenario_id: s for s in result.standings}
    assert by["good"].decision == "above" and by["bad"].decision == "below"
    assert by["bad"].n == 3  # decided by its first three trials
    # 3 passes of 3 at k = 3: lower bound 0.05**(3/(n+1)) > 0.5 from n = 12 on
    assert by["good"].n == 12
    assert result.trials_run == len(pipeline.played) == len(set(pipeline.played)) <= 150
    assert result.trials_run == sum(s.n for s in result.standings)
    # every verdict waited for: the counts are the projection's, none missing
    assert all(s.passed + s.failed == s.trials for s in result.standings)
    assert by["mid"].passed == sum(
        1 for t in pipeline.played if ":mid:" in t and truth("mid", int(t[-3:])) == "passed"
    )
    # trial ids continue from 001 without gaps
    assert sorted(t for t in pipeline.played if ":good:" in t) == [
        f"{RUN}:good:{n:03d}" for n in range(1, 13)
    ]


def test_budget_is_never_exceeded_and_a_rerun_adds_nothing() -> None:
    pipeline = FakePipeline(truth)
    first = run(pipeline, SCENARIOS, budget=20, goal=0.5)
    assert first.trials_run == 20 == len(pipeline.played)
    assert {s.scenario_id: s.decision for s in first.standings}["mid"] == "undecided"
    again = run(pipeline, SCENARIOS, budget=20, goal=0.5)
    assert (again.added, again.rounds, again.trials_run) == (0, 0, 20)
    assert len(pipeline.played) == 20
    # a larger budget on the same run goes on where it stopped, numbers continuing
    more = run(pipeline, SCENARIOS, budget=26, goal=0.5)
    assert more.added == 6 and more.trials_run == 26 == len(set(pipeline.played))


def test_batch_bounds_each_round() -> None:
    pipeline = FakePipeline(truth)
    rounds: list[dict[str, int]] = []
    asyncio.run(
        run_adaptive(
            run_id=RUN,
            scenarios=SCENARIOS,
            options=AdaptiveOptions(budget=40, goal=0.5, batch=4, poll_s=0.001),
            default_goal=0.8,
            in_log=set(),
            play=pipeline.play,
            verdicts=pipeline.verdicts,
            on_round=lambda n, given: rounds.append(dict(given)),
        )
    )
    assert rounds[0] == {"good": 3, "bad": 3, "mid": 3}  # the initial k each
    assert all(sum(r.values()) <= 4 for r in rounds[1:])
    assert "bad" not in {sid for r in rounds[1:] for sid in r}


def test_invalid_and_errored_trials_are_run_again_and_kept_out_of_n() -> None:
    def spoiled(sid: str, number: int) -> str:
        return {1: "invalid", 2: "error"}.get(number, "failed")

    pipeline = FakePipeline(spoiled)
    result = run(pipeline, [scenario("s")], budget=10, goal=0.5)
    s = result.standings[0]
    assert (s.invalid, s.errors, s.n, s.failed) == (1, 1, 3, 3)
    assert s.decision == "below" and result.trials_run == 5


def test_a_verdict_that_never_comes_stops_the_run_with_exit_1() -> None:
    class Stuck(FakePipeline):
        def verdicts(self) -> dict[str, str]:
            return {}

    pipeline = Stuck(truth)
    result = run(pipeline, [scenario("good")], budget=10, verdict_timeout_s=0.05)
    assert result.late == [f"{RUN}:good:{n:03d}" for n in (1, 2, 3)]
    assert result.exit_code() == 1 and len(pipeline.played) == 3


@pytest.mark.parametrize(
    ("given", "alert", "want"), [(0.6, 0.9, 0.6), (None, 0.9, 0.9), (None, None, 0.8)]
)
def test_goal_is_the_option_else_the_alert_target_else_the_default(
    given: float | None, alert: float | None, want: float
) -> None:
    assert goal_of(scenario("s", alert=alert), given, 0.8) == want


def test_the_summary_table_says_each_decision_and_the_fixed_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pipeline = FakePipeline(truth)
    result = run(pipeline, SCENARIOS, budget=30, goal=0.5)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(typer.Exit) as ended:
        _adaptive_summary(result, Console(file=out, width=200), Console(file=err, width=200), False)
    assert ended.value.exit_code == 0
    text = out.getvalue()
    rows = {
        line.split()[1]: line.split("│")
        for line in text.splitlines()
        if any(f" {sid} " in line for sid in ("good", "bad", "mid"))
    }
    # each decision from the trials played and the truth, here: Beta(c+1, n-c+1) quantiles
    # of p raised to k = 3, against the goal 0.5
    for sid in ("good", "bad", "mid"):
        numbers = [int(t[-3:]) for t in pipeline.played if f":{sid}:" in t]
        n, c = len(numbers), sum(truth(sid, x) == "passed" for x in numbers)
        lower, upper = (float(beta.ppf(q, c + 1, n - c + 1)) ** 3 for q in (0.05, 0.95))
        want = "above" if lower > 0.5 else "below" if upper < 0.5 else "undecided"
        cells = [cell.strip() for cell in rows[sid]]
        assert cells[2:4] == [str(n), str(c)] and cells[-2] == want, (sid, cells)
    # one row of each decision (a good scenario is shown above the goal after 12 passes)
    assert sorted(cells[-2] for cells in ([c.strip() for c in r] for r in rows.values())) == [
        "above",
        "below",
        "undecided",
    ]
    assert f"trials run: 30 of a budget of 30 (30 now, in {result.rounds} round(s))" in text
    assert f"same interval widths: {result.fixed_plan_trials}" in text
    with pytest.raises(typer.Exit):
        _adaptive_summary(result, Console(file=io.StringIO()), Console(file=io.StringIO()), True)
    data = json.loads(capsys.readouterr().out)
    assert list(data)[:4] == ["run_id", "trials_run", "budget", "scenarios"]
    assert list(data["scenarios"][0])[:10] == [
        "scenario_id",
        "n",
        "passed",
        "failed",
        "errors",
        "invalid",
        "pass_hat_k",
        "lower",
        "upper",
        "decision",
    ]


def test_trials_of_the_run_for_other_scenarios_count_against_the_budget() -> None:
    pipeline = FakePipeline(truth)
    earlier = {f"{RUN}:gone:{n:03d}" for n in range(1, 8)}  # a scenario not run now: 7 trials
    result = run(pipeline, [scenario("good")], budget=10, in_log=earlier, goal=0.5)
    assert len(pipeline.played) == 3 and result.trials_run == 10
