"""Generated production-like traffic, whose outcomes are known, through the whole pipeline."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from services.contract.topics import Topic
from services.grading.scenario_loader import load_scenarios
from tests.e2e.conftest import Pipeline, own_scenarios
from tests.e2e.figures import brute_force
from tests.support import ROOT, read_topic

pytestmark = pytest.mark.e2e
EXAMPLES = ROOT / "examples" / "scenarios"
OWN = "pipe-"  # this test's scenario ids on the shared pipeline: pipe-<example id>


def _ok(result) -> str:  # type: ignore[no-untyped-def]
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_every_trial_gets_its_expected_outcome(shared_pipeline: Pipeline, tmp_path: Path) -> None:
    pipeline = shared_pipeline
    scenarios = own_scenarios(EXAMPLES, tmp_path / "scenarios", OWN)
    run_id = "e2e-run"
    traffic, expected_file = tmp_path / "traffic.jsonl", tmp_path / "expected.json"
    _ok(pipeline.passk("scenarios", "publish", str(scenarios)))
    _ok(
        pipeline.passk(
            "generate",
            "--scenarios",
            str(scenarios),
            "--run-id",
            run_id,
            "--out",
            str(traffic),
            "--expected",
            str(expected_file),
            "--trials",
            "5",
            "--every-mode",
            "--seed",
            "11",
            "--default-pass-prob",
            "0.9",
            "--pass-prob",
            f"{OWN}debrief-safety-incident=1.0",
        )
    )
    _ok(pipeline.passk("replay", str(traffic)))
    expected = json.loads(expected_file.read_text())
    # `passk wait --expected` fails, listing them, unless every trial got its expected outcome
    _ok(
        pipeline.passk(
            "wait", "--run-id", run_id, "--expected", str(expected_file), "--timeout", "300"
        )
    )
    pipeline.wait_settled()

    report = json.loads(_ok(pipeline.passk("report", "--run-id", run_id, "--json")))
    trials = {t["trial_id"]: t for t in report["trials"]}
    assert set(trials) == {t["trial_id"] for t in expected["trials"]}
    modes = Counter()
    for want in expected["trials"]:
        got = trials[want["trial_id"]]
        assert got["outcome"] == want["expected_outcome"], (want, got)
        assert sorted({c["check"] for c in got["failed_checks"]}) == sorted(
            set(want["expected_failed_checks"])
        ), (want, got)
        assert got["exit_source"] == want["expected_exit_source"], (want, got)
        modes[want["failure_mode"]] += 1
        for quirk in want["quirks"]:
            modes[quirk] += 1
    # the cases the issue names are really in this traffic
    for case in (
        "missing_field",
        "wrong_exit",
        "unexpected_follow_up",
        "over_turn_limit",
        "judge_failed",
        "session_early",
        "session_late",
        "session_missing",
        "duplicated",
        "product_exit_wrong",
    ):
        assert modes[case] >= 1, f"{case} not exercised"
    # Both sources of the exit were checked somewhere in this traffic.
    assert {t["expected_exit_source"] for t in expected["trials"]} == {"session", "harness"}
    # A scenario without product-owned completion was graded with no session at all.
    assert report["without_state_gate"] == [f"{OWN}debrief-quick-question"]
    chat = [t for t in report["trials"] if t["scenario_id"] == f"{OWN}debrief-quick-question"]
    assert chat and all(t["completion"] == "conversation" for t in chat)
    assert any(t["outcome"] == "passed" for t in chat)

    # pass@k and pass^k equal an independent computation, n > k included
    by_scenario: dict[str, list[bool]] = defaultdict(list)
    for t in expected["trials"]:
        by_scenario[t["scenario_id"]].append(t["expected_outcome"] == "passed")
    ks = {s["scenario_id"]: s["k"] for s in expected["scenarios"]}
    rows = {s["scenario_id"]: s for s in report["scenarios"]}
    assert set(rows) == set(by_scenario)
    assert any(len(v) > ks[s] for s, v in by_scenario.items()), "no scenario with n > k"
    for scenario_id, outcomes in by_scenario.items():
        row, k = rows[scenario_id], ks[scenario_id]
        at_k, hat_k = brute_force(outcomes, k)
        assert row["k"] == k and row["n"] == len(outcomes)
        assert row["passed"] == sum(outcomes)
        assert row["pass_at_k"] == pytest.approx(at_k)
        assert row["pass_hat_k"] == pytest.approx(hat_k)
        assert row["scenario_passed"] is all(outcomes)

    # every judge of every trial got a verdict, through the stand-in over HTTP
    judges = Counter(
        v["trial_id"] for _, v, _ in read_topic(pipeline.settings, Topic.JUDGE_VERDICTS)
    )
    judges_of = {s.id: len(s.judges) for s in load_scenarios(scenarios).scenarios}
    assert sum(judges_of.values()) > 0
    for t in expected["trials"]:
        assert judges[t["trial_id"]] >= judges_of[t["scenario_id"]], t["trial_id"]

    # the deploy gate agrees: some scenario is flaky, so it must fail this build
    gate = pipeline.passk("gate", "--run-id", run_id)
    assert gate.returncode == (0 if all(all(v) for v in by_scenario.values()) else 1), gate.stdout

    # the aggregate's run figures are the report's, scenario by scenario
    last: dict[str, dict] = {}  # type: ignore[type-arg]
    for _, record, _ in read_topic(pipeline.settings, Topic.SCENARIO_RELIABILITY):
        if record["run_id"] == run_id:
            last[record["scenario_id"]] = record  # keyed by scenario: log order per scenario
    assert set(last) == set(rows)
    for scenario_id, row in rows.items():
        got = last[scenario_id]
        assert {f: got[f] for f in ("k", "n", "passed", "failed", "errors")} == {
            f: row[f] for f in ("k", "n", "passed", "failed", "errors")
        }, scenario_id
        assert got["pass_hat_k"] == pytest.approx(row["pass_hat_k"])
        assert got["pass_at_k"] == pytest.approx(row["pass_at_k"])
        assert got["scenario_passed"] is row["scenario_passed"]
