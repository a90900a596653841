"""`passk run --adaptive` against the reference product (examples/agent/) through the real
broker and every processor. Each scenario's true pass rate is the product's own fault plan
(examples/agent/debrief.py), never passk's: one never faulted (pass^k = 1), two always
faulted (pass^k = 0), one faulted on every fifth trial (p = 0.8, pass^3 = 0.512, at the
goal 0.5: it never decides and takes what budget is left). The fixed plan it is compared
with is computed here from the verdicts (scipy's Beta quantiles), not taken from passk.
The three far scenarios also run alone under another run id: decided with budget left,
and the same command again adds no trial."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import urllib.request
from collections.abc import Iterable
from math import floor
from pathlib import Path

import pytest
import yaml
from scipy.stats import beta

from services.contract.topics import Topic
from tests.e2e.conftest import Pipeline, free_port
from tests.e2e.test_harness import SCENARIOS, reference_product, target
from tests.support import ROOT, read_topic, stop, wait_for

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
TRUE_SIDE = {
    "debrief-billable-repair": "above",
    "debrief-follow-up-required": "below",
    "debrief-warranty-no-charge": "below",
}


def four_scenarios(tmp_path: Path, ids: Iterable[str] = PLAN, name: str = "scenarios") -> Path:
    out = tmp_path / name
    out.mkdir()
    for sid in ids:
        raw = yaml.safe_load((SCENARIOS / f"{sid}.yaml").read_text())
        (out / f"{sid}.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def width(n: int, c: int, k: int, credibility: float = 0.9) -> float:
    """The width of the equal-tailed credible interval of pass^k after c passes in n judged
    trials: p has the posterior Beta(c+1, n-c+1) under a uniform prior, and p**k is
    increasing in p, so its quantiles are p's raised to k."""
    tail = (1 - credibility) / 2
    lower, upper = beta.ppf([tail, 1 - tail], c + 1, n - c + 1) ** k
    return float(upper - lower)


def fixed_plan(counts: dict[str, tuple[int, int, int]]) -> int:
    """Trials a fixed plan (the same n for every scenario) needs to reach, for every
    scenario, the interval width the adaptive run reached, at the pass rate it showed:
    per scenario the least n >= k that is no wider; the largest of those, for each one."""
    needs = []
    for n, c, k in counts.values():
        m = k
        while width(m, floor(c / n * m + 0.5), k) > width(n, c, k) + 1e-9:
            m += 1
        needs.append(m)
    return max(needs) * len(counts)


def _ok(result) -> str:  # type: ignore[no-untyped-def]
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def test_adaptive_run_decides_far_scenarios_cheaply_within_budget_and_reruns_add_none(
    shared_pipeline: Pipeline, tmp_path: Path
) -> None:
    pipeline = shared_pipeline
    scenarios = four_scenarios(tmp_path)
    run_id = "e2e-adaptive"
    _ok(pipeline.passk("scenarios", "publish", str(scenarios)))
    args = (
        "run",
        "--scenarios",
        str(scenarios),
        "--run-id",
        run_id,
        "--adaptive",
        "--budget",
        str(BUDGET),
        "--goal",
        str(GOAL),
        "--batch",
        "6",
        "--concurrency",
        "6",
        "--verdict-timeout",
        "300",
        "--json",
    )
    # the far scenarios alone, in a run of their own: each decided with budget left
    far = four_scenarios(tmp_path, TRUE_SIDE, "far-scenarios")
    decided_id = "e2e-adaptive-decided"
    decided_args = [a if a != run_id else decided_id for a in args]
    decided_args[decided_args.index("--scenarios") + 1] = str(far)
    decided_args[decided_args.index("--batch") + 1] = "3"
    with reference_product(tmp_path, PLAN) as (port, db):
        tgt = str(target(tmp_path, port, db, "http"))
        first = json.loads(_ok(pipeline.passk(*args, "--target", tgt, timeout=1200)))
        again = json.loads(_ok(pipeline.passk(*args, "--target", tgt, timeout=600)))
        decided = json.loads(_ok(pipeline.passk(*decided_args, "--target", tgt, timeout=900)))
        decided_again = json.loads(_ok(pipeline.passk(*decided_args, "--target", tgt, timeout=600)))
        sessions = (
            sqlite3.connect(db)
            .execute("SELECT trial_id, scenario_id FROM sessions WHERE trial_id IS NOT NULL")
            .fetchall()
        )

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
    logged = {
        v["trial_id"]
        for _, v, _ in read_topic(pipeline.settings, Topic.CONVERSATION_FINISHED, timeout=30)
        if v["run_id"] == run_id
    }
    assert first["trials_run"] == len(logged) == BUDGET == first["budget"]
    assert len({t for t, _ in sessions if t.startswith(f"{run_id}:")}) == BUDGET
    assert sum(s["n"] + s["errors"] + s["invalid"] for s in first["scenarios"]) == BUDGET
    # decided far scenarios cost little: their k trials each for the always-faulted ones
    # (k = 3 and 5 in the example files); the never-faulted one (k = 3) until its lower
    # bound 0.05**(3/(n+1)) passes 0.5, at n = 12
    assert by["debrief-follow-up-required"]["n"] == 3
    assert by["debrief-warranty-no-charge"]["n"] == 5
    assert by["debrief-billable-repair"]["n"] == 12
    # re-running the same run id adds no trial and answers the same
    assert again["added"] == 0 and again["trials_run"] == BUDGET
    assert again["scenarios"] == first["scenarios"]
    # the projection agrees: every trial has its verdict, counted where the summary says
    report = json.loads(_ok(pipeline.passk("report", "--run-id", run_id, "--json")))
    counted = {s["scenario_id"]: s["n"] for s in report["scenarios"]}
    assert counted == {sid: s["n"] + s["errors"] + s["invalid"] for sid, s in by.items()}
    # the fixed plan, computed here from the verdicts the projection holds (not from
    # passk's figure): at the pass rate each scenario showed, the trials reaching the
    # width its interval reached (k from the example files), for every scenario
    k_of = {sid: yaml.safe_load((SCENARIOS / f"{sid}.yaml").read_text())["trials"] for sid in PLAN}
    outcomes: dict[str, list[str]] = {sid: [] for sid in PLAN}
    for t in report["trials"]:
        outcomes[t["scenario_id"]].append(t["outcome"])
    judged = {
        sid: (o.count("passed") + o.count("failed"), o.count("passed"), k_of[sid])
        for sid, o in outcomes.items()
    }
    fixed = fixed_plan(judged)
    assert fixed >= 4 * near["n"] - 8  # about the near scenario's trials, for each of four
    assert first["trials_run"] <= 0.6 * fixed, (first["trials_run"], fixed, judged)
    # passk's own figure, in the summary and the report, is that one
    assert first["fixed_plan_trials"] == fixed
    assert report["fixed_plan"]["trials_run"] == BUDGET
    assert report["fixed_plan"]["fixed_plan_trials"] == fixed

    # every scenario decided with budget left: the run stopped there, and re-running the
    # same run id adds no trial (k each for the always-faulted ones, 12 for the other)
    spent = 3 + 5 + 12
    assert {s["scenario_id"]: s["decision"] for s in decided["scenarios"]} == TRUE_SIDE
    assert decided["trials_run"] == decided["added"] == spent < decided["budget"] == BUDGET
    assert decided_again["added"] == 0 and decided_again["rounds"] == 0
    assert decided_again["trials_run"] == spent
    assert decided_again["scenarios"] == decided["scenarios"]
    in_log = {
        v["trial_id"]
        for _, v, _ in read_topic(pipeline.settings, Topic.CONVERSATION_FINISHED, timeout=30)
        if v["run_id"] == decided_id
    }
    assert len(in_log) == spent
    assert len({t for t, _ in sessions if t.startswith(f"{decided_id}:")}) == spent


BROKEN = "Hello! I'm your assistant. How can I help you today?"  # the stand-in's line


def user_breaks_role_scenario(tmp_path: Path) -> Path:
    """The billable repair played by a model user (no script: the stand-in says the
    instructions' sentences in order) with a user check that catches the assistant's voice."""
    raw = yaml.safe_load((SCENARIOS / "debrief-billable-repair.yaml").read_text())
    raw["id"] = "adaptive-user-breaks-role"
    script = raw["user"].pop("script")
    raw["user"]["instructions"] = " ".join(script)
    raw["user_checks"] = [
        {
            "id": "stayed_in_role",
            "kind": "regex",
            "role": "user",
            "pattern": "(?i)how can I help|I'm your assistant",
            "must_match": False,
        }
    ]
    out = tmp_path / "user-scenarios"
    out.mkdir()
    (out / "user.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def test_trials_a_role_breaking_user_spoiled_are_invalid_out_of_pass_k_and_run_again(
    shared_pipeline: Pipeline, tmp_path: Path
) -> None:
    pipeline = shared_pipeline
    scenarios = user_breaks_role_scenario(tmp_path)
    run_id = "e2e-adaptive-invalid"
    _ok(pipeline.passk("scenarios", "publish", str(scenarios)))
    port = free_port()
    user_model = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli",
            "judge-standin",
            "--port",
            str(port),
            "--user-breaks-role-every",
            "3",
        ],
        cwd=ROOT,
        env=pipeline.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: _answers(port), timeout=60, what="the user's stand-in up")
        with reference_product(tmp_path, {}) as (agent_port, db):
            # one trial at a time, so conversations 1, 4, 7 (the user breaking role) are
            # trials 001, 004, 007; goal 0.5 is not decided by 5 passes of 5 (k = 3)
            result = pipeline.passk(
                "run",
                "--scenarios",
                str(scenarios),
                "--run-id",
                run_id,
                "--target",
                str(target(tmp_path, agent_port, db, "http")),
                "--adaptive",
                "--budget",
                "8",
                "--goal",
                "0.5",
                "--batch",
                "1",
                "--concurrency",
                "1",
                "--verdict-timeout",
                "300",
                "--json",
                env={
                    "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
                    "OPENAI_API_KEY": "stand-in",
                },
                timeout=900,
            )
            summary = json.loads(_ok(result))
        stats = json.loads(
            urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5).read()
        )
    finally:
        stop(user_model)
    assert (stats["user_conversations"], stats["user_broke_role"]) == (8, 3)
    # which trials the user spoiled, from the transcripts in the log (not from passk)
    events = {
        v["trial_id"]: v
        for _, v, _ in read_topic(pipeline.settings, Topic.CONVERSATION_FINISHED, timeout=30)
        if v["run_id"] == run_id
    }
    spoiled = sorted(
        t
        for t, v in events.items()
        if next(m["content"] for m in v["transcript"] if m["role"] == "user") == BROKEN
    )
    assert spoiled == [f"{run_id}:adaptive-user-breaks-role:{n:03d}" for n in (1, 4, 7)]
    assert len(events) == summary["trials_run"] == 8  # the budget, not one more
    s = summary["scenarios"][0]
    # the spoiled trials were run again: five judged trials, every one passed
    assert (s["n"], s["passed"], s["failed"], s["errors"], s["invalid"]) == (5, 5, 0, 0, 3)
    assert s["pass_hat_k"] == 1.0 and s["decision"] == "undecided"
    # the report: pass^k without them, and each listed with the user check it failed
    report = json.loads(_ok(pipeline.passk("report", "--run-id", run_id, "--json")))
    row = report["scenarios"][0]
    assert (row["n"], row["passed"], row["invalid"], row["pass_hat_k"]) == (5, 5, 3, 1.0)
    assert row["scenario_passed"] is True
    listed = {t["trial_id"]: [c["check"] for c in t["checks"]] for t in report["invalid_trials"]}
    assert listed == dict.fromkeys(spoiled, ["user:stayed_in_role"])
    outcomes = {t["trial_id"]: t["outcome"] for t in report["trials"]}
    assert {t for t, o in outcomes.items() if o == "invalid"} == set(spoiled)
    # without the user check these were the agent's failures: the product, asked a
    # question first, answered it and filed nothing
    failed = {t["trial_id"]: [c["check"] for c in t["failed_checks"]] for t in report["trials"]}
    assert all("gate:state" in failed[t] for t in spoiled), failed
    # one scenario's 8 trials could have been `--trials 8`: no fixed plan to compare with
    assert report["fixed_plan"] is None
    text = _ok(pipeline.passk("report", "--run-id", run_id))
    assert "invalid" in text and all(t in text for t in spoiled)
    # counted apart in the windows too (the aggregate's records, through the projection)

    def windows_count() -> bool:
        out = json.loads(_ok(pipeline.passk("windows", "--json")))
        mine = [
            w
            for w in out["windows"]
            if w["scenario_id"] == "adaptive-user-breaks-role" and w["window"] == "1d"
        ]
        return sum(w["invalid"] for w in mine) == 3 and sum(w["n"] for w in mine) == 5

    wait_for(windows_count, timeout=120, interval=2.0, what="the windows counting 3 invalid")


def _answers(port: int) -> bool:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).status == 200
    except OSError:
        return False
