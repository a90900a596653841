from __future__ import annotations

from math import comb

import pytest

from schemas.events import TrialMetrics
from services.grading.estimators import pass_hat_k_interval
from services.report.domain import (
    EXIT_FAIL,
    EXIT_NOTHING_TO_GATE,
    EXIT_PASS,
    build_report,
    gate_decision,
    not_counted,
    previous_run,
    report_json,
)
from services.storage.records import trial_record
from tests.unit.storage import factories as f


def trials(*specs: tuple[str, str, list[tuple[str, str]] | None], k: int = 3, run: str = "r"):
    """(scenario_id, outcome, failed checks) -> trial rows, as the store returns them."""
    return [
        trial_record(
            f.verdict(
                f"{scenario}-{i}",
                outcome,
                k=k,
                run_id=run,
                scenario_id=scenario,
                failed=failed,
                when=i,
            )
        )
        for i, (scenario, outcome, failed) in enumerate(specs)
    ]


def one_scenario(outcomes: list[str], k: int = 3):
    return trials(*[("s", o, None) for o in outcomes], k=k)


@pytest.mark.parametrize(
    ("outcomes", "k", "expected"),
    [
        # n < k: insufficient, no estimates, never passed (even when all passed)
        (
            ["passed", "passed"],
            3,
            dict(n=2, passed=2, pass_at_k=None, pass_hat_k=None, scenario_passed=False),
        ),
        # n == k and all passed
        (
            ["passed"] * 3,
            3,
            dict(n=3, passed=3, pass_at_k=1.0, pass_hat_k=1.0, scenario_passed=True),
        ),
        # n == k, one failed: pass@k 1, pass^k 0
        (
            ["passed", "failed", "passed"],
            3,
            dict(n=3, failed=1, pass_at_k=1.0, pass_hat_k=0.0, scenario_passed=False),
        ),
        # n > k, unbiased: c=4 of n=6, k=3
        (
            ["passed"] * 4 + ["failed"] * 2,
            3,
            dict(
                n=6,
                passed=4,
                failed=2,
                pass_at_k=1 - comb(2, 3) / comb(6, 3),
                pass_hat_k=comb(4, 3) / comb(6, 3),
                scenario_passed=False,
            ),
        ),
        # n > k with few passes: pass@k = 1 - C(4,2)/C(5,2) = 0.4
        (["passed"] + ["failed"] * 4, 2, dict(n=5, passed=1, pass_at_k=0.4, pass_hat_k=0.0)),
        # errors are counted apart and never as passes
        (
            ["passed", "passed", "error"],
            3,
            dict(n=3, passed=2, failed=0, errors=1, pass_hat_k=0.0, scenario_passed=False),
        ),
        (["error"] * 3, 3, dict(n=3, passed=0, errors=3, pass_at_k=0.0, scenario_passed=False)),
    ],
)
def test_scenario_figures(outcomes: list[str], k: int, expected: dict) -> None:
    (scenario,) = build_report("r", one_scenario(outcomes, k)).scenarios
    got = scenario.model_dump()
    assert {key: got[key] for key in expected} == pytest.approx(expected)
    assert scenario.k == k


def test_failing_checks_are_ranked_by_trials_failed_then_name() -> None:
    report = build_report(
        "r",
        trials(
            ("a", "failed", [("gate:state", "no parts"), ("judge:polite", "rude")]),
            ("a", "failed", [("gate:state", "no fault")]),
            ("b", "failed", [("judge:polite", "curt"), ("gate:exit", "max_turns")]),
            ("b", "passed", None),
            # a check listed twice in one trial still counts that trial once
            ("b", "error", [("judge:topics", "model kept failing"), ("judge:topics", "again")]),
        ),
    )
    ranked = [(c.check, c.failures, c.share, c.example_reason) for c in report.failing_checks]
    assert ranked == [
        ("gate:state", 2, 0.4, "no parts"),
        ("judge:polite", 2, 0.4, "rude"),
        ("gate:exit", 1, 0.2, "max_turns"),
        ("judge:topics", 1, 0.2, "model kept failing"),
    ]
    assert report.failing_checks[1].scenarios == ["a", "b"]


def test_json_has_exactly_the_documented_shape() -> None:
    data = report_json(
        build_report(
            "r", trials(("b", "failed", [("gate:state", "missing field")]), ("a", "passed", None))
        )
    )
    # The documented keys first and in order; the additions after them.
    assert list(data) == [
        "run_id",
        "scenarios",
        "trials",
        "previous_run",
        "without_state_gate",
        "flakiness",
        "advisory_judges",
        "advisory_checks",
        "judge_cost",
        "invalid_trials",
        "fixed_plan",
    ]
    assert data["run_id"] == "r"
    assert [list(s) for s in data["scenarios"]] == [
        [
            "scenario_id",
            "k",
            "n",
            "passed",
            "failed",
            "errors",
            "pass_at_k",
            "pass_hat_k",
            "scenario_passed",
            "invalid",
            "pass_hat_k_lower",
            "pass_hat_k_upper",
            "completion",
            "scenario_versions",
            "tokens_median",
            "turns_median",
            "duration_s_median",
            "n_sampled",
            "passed_sampled",
            "errors_sampled",
            "pass_hat_k_sampled",
            "pass_hat_k_sampled_lower",
            "pass_hat_k_sampled_upper",
            "judge_calls_saved",
            "judge_tokens_saved_estimate",
            "judge_cost_saved_estimate",
        ]
    ] * 2
    # each scenario names the versions its trials were graded against
    assert all(len(s["scenario_versions"]) == 1 for s in data["scenarios"])
    assert [list(t) for t in data["trials"]] == [
        [
            "trial_id",
            "scenario_id",
            "outcome",
            "failed_checks",
            "exit_reason",
            "exit_source",
            "completion",
            "tokens",
            "turns",
            "duration_s",
            "checks_passed",
            "advisory_checks",
            "judge_calls",
            "judge_input_tokens",
            "judge_output_tokens",
            "judge_cost",
            "skipped_judges",
            "not_sampled_judges",
        ]
    ] * 2
    assert [s["scenario_id"] for s in data["scenarios"]] == ["a", "b"]
    failed = data["trials"][1]["failed_checks"]
    assert failed == [{"check": "gate:state", "reason": "missing field"}]


def test_only_the_runs_trials_are_reported() -> None:
    rows = trials(("s", "passed", None), run="r1") + trials(("s", "failed", None), run="r2")
    report = build_report("r1", rows)
    assert [t.outcome for t in report.trials] == ["passed"]


@pytest.mark.parametrize(
    ("specs", "expect", "code", "mentions"),
    [
        ([("s", "passed", None)] * 3, None, EXIT_PASS, ["all 1 scenarios passed"]),
        ([("s", "passed", None)] * 2, None, EXIT_FAIL, ["insufficient trials: 2 of k=3"]),
        (
            [
                ("s", "passed", None),
                ("s", "failed", [("judge:polite", "rude")]),
                ("s", "passed", None),
            ],
            None,
            EXIT_FAIL,
            ["pass^k=0.000", "judge:polite x1: rude"],
        ),
        (
            [("s", "passed", None)] * 2 + [("s", "error", [("judge:t", "timeout")])],
            None,
            EXIT_FAIL,
            ["1 errors", "judge:t"],
        ),
        ([("s", "passed", None)] * 3, 2, EXIT_FAIL, ["expected 2 scenarios, observed 1"]),
        ([], None, EXIT_NOTHING_TO_GATE, ["nothing to gate"]),
    ],
)
def test_gate_decision(specs: list, expect: int | None, code: int, mentions: list[str]) -> None:
    decision = gate_decision(build_report("r", trials(*specs)), expect)
    assert decision.exit_code == code
    text = decision.message + " " + " ".join(f.why for f in decision.failures)
    for words in mentions:
        assert words in text


def test_each_scenario_has_its_credible_interval_and_tracked_medians() -> None:
    rows = [
        trial_record(
            f.verdict(
                f"t{i}",
                o,
                scenario_id="s",
                when=i,
                metrics=TrialMetrics(
                    turns=turns,
                    input_tokens=100 * turns,
                    output_tokens=10,
                    duration_ms=1000.0 * turns,
                ),
            )
        )
        for i, (o, turns) in enumerate([("passed", 4), ("passed", 6), ("failed", 10)])
    ]
    rows.append(trial_record(f.verdict("t9", "passed", scenario_id="s", when=9, metrics=None)))
    (scenario,) = build_report("run-1", rows).scenarios
    assert (scenario.pass_hat_k_lower, scenario.pass_hat_k_upper) == pytest.approx(
        pass_hat_k_interval(4, 3, 3)
    )
    assert scenario.pass_hat_k_lower < scenario.pass_hat_k < scenario.pass_hat_k_upper
    # A trial that reported nothing is left out of the medians, not counted as zero.
    assert scenario.turns_median == 6
    assert scenario.tokens_median == 610
    assert scenario.duration_s_median == 6.0


def test_whose_exit_and_the_scenarios_without_a_state_gate_are_reported() -> None:
    rows = [
        trial_record(
            f.verdict(
                "a1",
                "failed",
                scenario_id="a",
                exit_source="session",
                exit_reason="persona_exhausted",
            )
        ),
        trial_record(
            f.verdict(
                "c1", "passed", scenario_id="chat", completion="conversation", exit_source="harness"
            )
        ),
    ]
    report = build_report("run-1", rows)
    assert report.without_state_gate == ["chat"]
    data = report_json(report)
    assert data["without_state_gate"] == ["chat"]
    assert [(t["trial_id"], t["exit_source"]) for t in data["trials"]] == [
        ("a1", "session"),
        ("c1", "harness"),
    ]


def test_flakiness_is_part_of_the_report() -> None:
    rows = trials(
        ("s", "passed", None), ("s", "failed", [("judge:x", "no")]), ("s", "passed", None)
    )
    data = report_json(build_report("r", rows))
    assert data["flakiness"] == [
        {
            "scenario_id": "s",
            "trials": 3,
            "passed": 2,
            "checks": [{"check": "judge:x", "failures": 1, "trials": 3, "example_reason": "no"}],
        }
    ]


@pytest.mark.parametrize(
    ("rows", "run", "expected"),
    [
        ([], "r2", None),
        ([("r1", "a", 1), ("r2", "a", 2)], "r2", "r1"),
        ([("r1", "a", 1), ("r2", "a", 2)], "r1", None),  # nothing before the first
        # the latest earlier run over exactly the same scenarios
        (
            [
                ("r0", "a", 0),
                ("r0", "b", 0),
                ("r1", "a", 1),
                ("r1", "b", 1),
                ("r2", "a", 2),
                ("r3", "a", 3),
                ("r3", "b", 3),
            ],
            "r3",
            "r1",
        ),
        ([("r1", "a", 1), ("r2", "a", 2), ("r2", "b", 2)], "r2", None),  # other scenarios
    ],
)
def test_previous_run_of_the_same_scenarios(rows, run, expected) -> None:
    assert previous_run(run, rows) == expected


def test_advisory_judges_are_listed_with_what_they_would_have_failed() -> None:
    from services.storage.records import judge_record

    judges = [
        judge_record(f.judge("t1", "polite", "failed", gating=False)),
        judge_record(f.judge("t2", "polite", "passed", gating=False)),
        judge_record(f.judge("t1", "topics", "failed")),
    ]
    report = build_report("run-1", trials(("s", "passed", None), run="run-1"), judges=judges)
    assert [(j.judge_id, j.verdicts, j.failed, j.why) for j in report.advisory_judges] == [
        ("polite", 2, 1, "declared gating: false in the scenario")
    ]


def test_advisory_judges_are_listed_apart_with_why_and_their_failures() -> None:
    from schemas.events import AdvisoryJudge
    from services.report.domain import gate_decision

    rows = trials(
        ("s", "passed", None), ("s", "passed", None), ("s", "failed", [("gate:exit", "wrong exit")])
    )
    says = [("failed", "asked twice"), ("passed", "fine"), ("failed", "asked again")]
    for row, (result, reason) in zip(rows, says, strict=True):
        row.advisory_judges = [
            AdvisoryJudge(
                judge_id="rep",
                why="below the bar: precision 0.60 < 0.80",
                result=result,
                reason=reason,
            ).model_dump(mode="json")
        ]
    report = build_report("r", rows)
    assert [c.check for c in report.failing_checks] == ["gate:exit"]  # not the advisory judge
    (line,) = report.advisory_judges
    assert (line.judge_id, line.failed, line.verdicts, line.example_reason, line.scenarios) == (
        "rep",
        2,
        3,
        "asked twice",
        ["s"],
    )
    assert line.why == "below the bar: precision 0.60 < 0.80"
    decision = gate_decision(report)
    assert decision.advisory == [
        "advisory judge rep (below the bar: precision 0.60 < 0.80): "
        "failed 2 of 3 trials, not counted; e.g. asked twice"
    ]
    assert report_json(report)["advisory_judges"][0]["why"] == line.why


@pytest.mark.parametrize(
    ("example", "said"),
    [
        ("asked twice", "advisory judge j: failed 1 of 4 trials, not counted; e.g. asked twice"),
        (None, "advisory judge j: failed 1 of 4 trials, not counted"),
        ("", "advisory judge j: failed 1 of 4 trials, not counted"),
    ],
)
def test_an_advisory_line_says_how_often_it_failed_and_an_example(example, said) -> None:  # type: ignore[no-untyped-def]
    assert not_counted("judge j", 1, 4, example) == said


def test_invalid_trials_are_listed_apart_and_out_of_every_figure() -> None:
    rows = trials(
        ("s", "passed", None),
        ("s", "invalid", [("user:in_role", "said it helps")]),
        ("s", "passed", None),
        ("s", "passed", None),
        ("s", "invalid", [("user:in_role", "again"), ("gate:exit", "no close")]),
    )
    report = build_report("r", rows)
    s = report.scenarios[0]
    assert (s.n, s.passed, s.invalid, s.scenario_passed) == (3, 3, 2, True)
    assert [(t.trial_id, [c.check for c in t.checks]) for t in report.invalid_trials] == [
        ("s-1", ["user:in_role"]),
        ("s-4", ["user:in_role"]),
    ]
    # a spoiled trial's checks are not the agent's failing checks
    assert report.failing_checks == []
    data = report_json(report)
    assert [t["trial_id"] for t in data["invalid_trials"]] == ["s-1", "s-4"]
    assert data["scenarios"][0]["invalid"] == 2
    assert gate_decision(report).exit_code == EXIT_PASS


def test_a_fixed_plan_run_has_no_comparison_an_adaptive_one_has() -> None:
    fixed = trials(*[("a", "passed", None)] * 4, *[("b", "failed", None)] * 4)
    assert build_report("r", fixed).fixed_plan is None
    # k below --trials for one scenario, at it for the other: still a fixed plan
    assert (
        build_report(
            "r",
            trials(*[("a", "passed", None)] * 3, k=3) + trials(*[("b", "passed", None)] * 5, k=5),
        ).fixed_plan
        is None
    )

    # 3 failed of 3 next to 20 passed of 20, both k = 1: a fixed plan reaching both widths
    # gives each 20 trials (the widest need, at 20 of 20), 40 in all; 23 were run
    def planned(scenario: str, outcome: str, count: int) -> list:  # as passk run names them
        return [
            trial_record(
                f.verdict(
                    f"r:{scenario}:{i:03d}", outcome, k=1, run_id="r", scenario_id=scenario, when=i
                )
            )
            for i in range(1, count + 1)
        ]

    adaptive = build_report("r", planned("low", "failed", 3) + planned("high", "passed", 20))
    assert adaptive.fixed_plan is not None
    assert (adaptive.fixed_plan.trials_run, adaptive.fixed_plan.fixed_plan_trials) == (23, 40)
    assert "23 trials" in adaptive.fixed_plan.text()
    assert "would have run 40" in adaptive.fixed_plan.text()
    # the projection does not hold the run's --credibility: the report compares 90 %
    # intervals, and says so
    assert "the same widths of 90% intervals" in adaptive.fixed_plan.text()
    assert report_json(adaptive)["fixed_plan"]["credibility"] == 0.9
    # the same counts from production traffic (trace ids, not passk run's): no plan to compare
    traffic = build_report(
        "r",
        trials(*[("low", "failed", None)] * 3, k=1) + trials(*[("high", "passed", None)] * 20, k=1),
    )
    assert traffic.fixed_plan is None
