"""`passk run --adaptive` against the reference product (examples/agent/) through the real
broker and every processor. Each scenario's true pass rate is the product's own fault plan
(examples/agent/debrief.py), never passk's: one never faulted (pass^k = 1), two always
faulted (pass^k = 0), one faulted on every fifth trial (p = 0.8, pass^3 = 0.512, at the
goal 0.5: it never decides and takes what budget is left)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from services.contract.topics import Topic
from tests.e2e.conftest import Pipeline
from tests.e2e.test_harness import SCENARIOS, reference_product, target
from tests.support import read_topic

pytestmark = pytest.mark.e2e
BUDGET = 60
GOAL = 0.5
EVERY_FIFTH = list(range(5, 200, 5))
PLAN = {
    "debrief-billable-repair": {},
    "debrief-follow-up-required": {"silent_close": "*"},
    "debrief-warranty-no-charge": {"silent_close": "*"},
    "debrief-safety-incident": {"silent_close": EVERY_FIFTH},
}
TRUE_SIDE = {"debrief-billable-repair": "above", "debrief-follow-up-required": "below",
             "debrief-warranty-no-charge": "below"}


def four_scenarios(tmp_path: Path) -> Path:
    out = tmp_path / "scenarios"
    out.mkdir()
    for sid in PLAN:
        raw = yaml.safe_load((SCENARIOS / f"{sid}.yaml").read_text())
        (out / f"{sid}.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def _ok(result) -> str:  # type: ignore[no-untyped-def]
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def test_adaptive_run_decides_far_scenarios_cheaply_within_budget_and_reruns_add_none(
        shared_pipeline: Pipeline, tmp_path: Path) -> None:
    pipeline = shared_pipeline
    scenarios = four_scenarios(tmp_path)
    run_id = "e2e-adaptive"
    _ok(pipeline.passk("scenarios", "publish", str(scenarios)))
    args = ("run", "--scenarios", str(scenarios), "--run-id", run_id, "--adaptive",
            "--budget", str(BUDGET), "--goal", str(GOAL), "--batch", "6", "--concurrency", "6",
            "--verdict-timeout", "300", "--json")
    with reference_product(tmp_path, PLAN) as (port, db):
        tgt = str(target(tmp_path, port, db, "http"))
        first = json.loads(_ok(pipeline.passk(*args, "--target", tgt, timeout=1200)))
        again = json.loads(_ok(pipeline.passk(*args, "--target", tgt, timeout=600)))
        sessions = sqlite3.connect(db).execute(
            "SELECT trial_id, scenario_id FROM sessions WHERE trial_id IS NOT NULL").fetchall()

    by = {s["scenario_id"]: s for s in first["scenarios"]}
    assert set(by) == set(PLAN)
    # far from the goal: decided, on the side the fault plan puts them
    for sid, side in TRUE_SIDE.items():
        assert by[sid]["decision"] == side, by[sid]
    # the near one's figures are the product's: one in five faulted, all others passed
    near = by["debrief-safety-incident"]
    assert near["decision"] == "undecided"
    assert near["failed"] == near["n"] // 5 and near["passed"] == near["n"] - near["n"] // 5
    # budget spent, never exceeded: by passk's count, the log's and the product's own
    logged = {v["trial_id"] for _, v, _ in read_topic(pipeline.settings,
                                                      Topic.CONVERSATION_FINISHED,
                                                      timeout=30)
              if v["run_id"] == run_id}
    assert first["trials_run"] == len(logged) == BUDGET == first["budget"]
    assert len({t for t, _ in sessions}) == BUDGET
    assert sum(s["n"] + s["errors"] + s["invalid"] for s in first["scenarios"]) == BUDGET
    # decided far scenarios cost little: their k trials each for the always-faulted ones
    # (k = 3 and 5 in the example files); the never-faulted one (k = 3) until its lower
    # bound 0.05**(3/(n+1)) passes 0.5, at n = 12
    assert by["debrief-follow-up-required"]["n"] == 3
    assert by["debrief-warranty-no-charge"]["n"] == 5
    assert by["debrief-billable-repair"]["n"] == 12
    # a fixed plan giving every scenario the trials the near one got (the widest need)
    fixed = 4 * near["n"]
    assert fixed - 8 <= first["fixed_plan_trials"] <= fixed
    assert first["trials_run"] <= 0.6 * first["fixed_plan_trials"]
    # re-running the same run id adds no trial and answers the same
    assert again["added"] == 0 and again["trials_run"] == BUDGET
    assert again["scenarios"] == first["scenarios"]
    # the projection agrees: every trial has its verdict, counted where the summary says
    report = json.loads(_ok(pipeline.passk("report", "--run-id", run_id, "--json")))
    counted = {s["scenario_id"]: s["n"] for s in report["scenarios"]}
    assert counted == {sid: s["n"] + s["errors"] + s["invalid"] for sid, s in by.items()}
