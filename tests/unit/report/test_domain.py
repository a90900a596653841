from __future__ import annotations

from math import comb

import pytest

from services.report.domain import (
    EXIT_FAIL,
    EXIT_NOTHING_TO_GATE,
    EXIT_PASS,
    build_report,
    gate_decision,
    report_json,
)
from services.sink.domain import trial_record
from tests.unit.sink import factories as f


def trials(*specs: tuple[str, str, list[tuple[str, str]] | None], k: int = 3, run: str = "r"):
    """(scenario_id, outcome, failed checks) -> trial rows, as the store returns them."""
    return [
        trial_record(
            f.verdict(f"{scenario}-{i}", outcome, k=k, run_id=run, scenario_id=scenario,
                      failed=failed, when=i)
        )
        for i, (scenario, outcome, failed) in enumerate(specs)
    ]


def one_scenario(outcomes: list[str], k: int = 3):
    return trials(*[("s", o, None) for o in outcomes], k=k)


@pytest.mark.parametrize(
    ("outcomes", "k", "expected"),
    [
        # n < k: insufficient, no estimates, never passed (even when all passed)
        (["passed", "passed"], 3, dict(n=2, passed=2, pass_at_k=None, pass_hat_k=None,
                                       scenario_passed=False)),
        # n == k and all passed
        (["passed"] * 3, 3, dict(n=3, passed=3, pass_at_k=1.0, pass_hat_k=1.0,
                                 scenario_passed=True)),
        # n == k, one failed: pass@k 1, pass^k 0
        (["passed", "failed", "passed"], 3, dict(n=3, failed=1, pass_at_k=1.0, pass_hat_k=0.0,
                                                 scenario_passed=False)),
        # n > k, unbiased: c=4 of n=6, k=3
        (["passed"] * 4 + ["failed"] * 2, 3,
         dict(n=6, passed=4, failed=2, pass_at_k=1 - comb(2, 3) / comb(6, 3),
              pass_hat_k=comb(4, 3) / comb(6, 3), scenario_passed=False)),
        # n > k with few passes: pass@k = 1 - C(4,2)/C(5,2) = 0.4
        (["passed"] + ["failed"] * 4, 2, dict(n=5, passed=1, pass_at_k=0.4, pass_hat_k=0.0)),
        # errors are counted apart and never as passes
        (["passed", "passed", "error"], 3, dict(n=3, passed=2, failed=0, errors=1,
                                                pass_hat_k=0.0, scenario_passed=False)),
        (["error"] * 3, 3, dict(n=3, passed=0, errors=3, pass_at_k=0.0, scenario_passed=False)),
    ],
)
def test_scenario_figures(outcomes: list[str], k: int, expected: dict) -> None:
    (scenario,) = build_report("r", one_scenario(outcomes, k)).scenarios
    got = scenario.model_dump()
    assert {key: got[key] for key in expected} == pytest.approx(expected)
    assert scenario.k == k


def test_failing_checks_are_ranked_by_trials_failed_then_name() -> None:
    report = build_report("r", trials(
        ("a", "failed", [("gate:state", "no parts"), ("judge:polite", "rude")]),
        ("a", "failed", [("gate:state", "no fault")]),
        ("b", "failed", [("judge:polite", "curt"), ("gate:exit", "max_turns")]),
        ("b", "passed", None),
        # a check listed twice in one trial still counts that trial once
        ("b", "error", [("judge:topics", "model kept failing"), ("judge:topics", "again")]),
    ))
    ranked = [(c.check, c.failures, c.share, c.example_reason) for c in report.failing_checks]
    assert ranked == [
        ("gate:state", 2, 0.4, "no parts"),
        ("judge:polite", 2, 0.4, "rude"),
        ("gate:exit", 1, 0.2, "max_turns"),
        ("judge:topics", 1, 0.2, "model kept failing"),
    ]
    assert report.failing_checks[1].scenarios == ["a", "b"]


def test_json_has_exactly_the_documented_shape() -> None:
    data = report_json(build_report("r", trials(
        ("b", "failed", [("gate:state", "missing field")]), ("a", "passed", None)
    )))
    assert list(data) == ["run_id", "scenarios", "trials"]
    assert data["run_id"] == "r"
    assert [list(s) for s in data["scenarios"]] == [[
        "scenario_id", "k", "n", "passed", "failed", "errors", "pass_at_k", "pass_hat_k",
        "scenario_passed",
    ]] * 2
    assert [list(t) for t in data["trials"]] == [
        ["trial_id", "scenario_id", "outcome", "failed_checks"]
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
        ([("s", "passed", None), ("s", "failed", [("judge:polite", "rude")]),
          ("s", "passed", None)], None, EXIT_FAIL,
         ["pass^k=0.000", "judge:polite x1: rude"]),
        ([("s", "passed", None)] * 2 + [("s", "error", [("judge:t", "timeout")])], None,
         EXIT_FAIL, ["1 errors", "judge:t"]),
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
