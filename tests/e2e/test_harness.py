"""`passk run` against the reference product (examples/agent/, in its own process) through
the real broker and every processor. Expected outcomes come from the product's own fault
switches (examples/agent/debrief.py: faults_for), never from passk's gates."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from examples.agent.debrief import faults_for
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.harness.domain import trial_number
from tests.e2e.conftest import Pipeline, free_port
from tests.support import ROOT, isolated_env, read_topic, stop, wait_for

pytestmark = pytest.mark.e2e
SCENARIOS = ROOT / "examples" / "scenarios"
REPEAT_JUDGE = {"id": "no_repeated_question", "kind": "repeated_question"}
# Which gate each fault must be caught by (the list).
CAUGHT_BY = {
    "lost_field": "gate:state",
    "silent_close": "gate:exit",
    "repeated_question": f"judge:{REPEAT_JUDGE['id']}",
}
PLAN: dict[str, dict[str, Any]] = {
    "debrief-billable-repair": {"lost_field": [2], "repeated_question": [3]},
    "debrief-follow-up-required": {"silent_close": [1]},
    "debrief-safety-incident": {"silent_close": [3], "repeated_question": [1]},
    "debrief-warranty-no-charge": {"repeated_question": [2], "lost_field": [4]},
}


@contextmanager
def reference_product(tmp_path: Path, plan: dict[str, Any]) -> Iterator[tuple[int, Path]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    port, db = free_port(), tmp_path / "agent" / "agent.db"
    log = open(tmp_path / "agent.log", "ab")  # lives with the process
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.agent.server",
            "--port",
            str(port),
            "--db",
            str(db),
            "--faults",
            json.dumps(plan),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        import urllib.request

        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "agent.log").read_text()
            try:
                return (
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).status
                    == 200
                )
            except OSError:
                return False

        wait_for(up, timeout=30, what="reference product up")
        yield port, db
    finally:
        stop(proc)
        log.close()


def scenarios_with_repeat_judge(tmp_path: Path) -> Path:
    """The example scenarios plus the deterministic re-asked-question judge."""
    out = tmp_path / "scenarios"
    out.mkdir()
    for file in sorted(SCENARIOS.glob("*.yaml")):
        raw = yaml.safe_load(file.read_text())
        if raw.get("completion") != "conversation":
            raw["judges"] = [*raw.get("judges", []), REPEAT_JUDGE]
        (out / file.name).write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def target(tmp_path: Path, port: int, db: Path, probe: str, timeout_s: float = 10) -> Path:
    state: dict[str, Any]
    if probe == "http":
        state = {
            "kind": "http",
            "url": f"http://127.0.0.1:{port}/sessions/{{session_id}}",
            "wait_s": 3,
        }
    else:
        state = {
            "kind": "sql",
            "url": f"sqlite:///{db}",
            "wait_s": 3,
            "query": "SELECT state, exit_reason FROM sessions "
            "WHERE id = :session_id AND state IS NOT NULL",
            "state_column": "state",
            "exit_column": "exit_reason",
        }
    file = tmp_path / f"target-{probe}.yaml"
    file.write_text(
        yaml.safe_dump(
            {
                "agent": {
                    "kind": "http",
                    "url": f"http://127.0.0.1:{port}/chat",
                    "timeout_s": timeout_s,
                },
                "state": state,
            }
        )
    )
    return file


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.parametrize("probe", ["http", "sql"])
def test_every_trial_gets_the_outcome_the_fault_plan_gives(
    shared_pipeline: Pipeline, tmp_path: Path, probe: str
) -> None:
    # On the shared pipeline: both probes publish these same scenarios (the example ids the
    # reference product knows, which no other sharing test uses), each its own run.
    pipeline = shared_pipeline
    scenarios = scenarios_with_repeat_judge(tmp_path)
    run_id = f"e2e-harness-{probe}"
    _ok(pipeline.passk("scenarios", "publish", str(scenarios)))
    with reference_product(tmp_path, PLAN) as (port, db):
        out = _ok(
            pipeline.passk(
                "run",
                "--scenarios",
                str(scenarios),
                "--target",
                str(target(tmp_path, port, db, probe)),
                "--run-id",
                run_id,
                "--trials",
                "4",
                "--concurrency",
                "4",
                "--json",
            )
        )
        # the product's own record of the faults it switched on, per session
        rows = (
            sqlite3.connect(db)
            .execute("SELECT trial_id, scenario_id, faults FROM sessions")
            .fetchall()
        )
    recorded = {trial: json.loads(faults) for trial, _, faults in rows}
    summary = json.loads(out)
    assert (summary["planned"], summary["skipped"], summary["run"], summary["published"]) == (
        21,
        0,
        21,
        21,
    ), summary
    _ok(pipeline.passk("wait", "--run-id", run_id, "--trials", "21", "--timeout", "300"))
    report = json.loads(_ok(pipeline.passk("report", "--run-id", run_id, "--json")))
    trials = {t["trial_id"]: t for t in report["trials"]}
    assert len(trials) == 21
    caught: dict[str, set[str]] = {f: set() for f in CAUGHT_BY}
    for trial_id, got in trials.items():
        scenario_id = got["scenario_id"]
        faults = faults_for(PLAN, scenario_id, trial_number(trial_id))
        assert recorded[trial_id] == faults  # the product switched on what the plan says
        expected_checks = {CAUGHT_BY[f] for f in faults}
        failed = {c["check"] for c in got["failed_checks"]}
        assert got["outcome"] == ("failed" if faults else "passed"), (trial_id, faults, got)
        assert failed == expected_checks, (trial_id, faults, got["failed_checks"])
        for fault in faults:
            caught[fault].add(trial_id)
    assert all(caught.values()), caught  # every fault was exercised and caught
    # the unfaulted scenario passes its gate; the faulted ones do not
    by_scenario = {s["scenario_id"]: s for s in report["scenarios"]}
    assert by_scenario["debrief-quick-question"]["scenario_passed"] is True
    assert by_scenario["debrief-billable-repair"]["scenario_passed"] is False


def _conversations(
    settings: Settings, run_id: str, min_count: int = 0, timeout: float = 30
) -> list[dict[str, Any]]:
    return [
        v
        for _, v, _ in read_topic(
            settings, Topic.CONVERSATION_FINISHED, min_count=min_count, timeout=timeout
        )
        if v["run_id"] == run_id
    ]


def _sessions(settings: Settings, run_id: str) -> list[dict[str, Any]]:
    return [
        v
        for _, v, _ in read_topic(settings, Topic.SESSION_PERSISTED, timeout=10)
        if v.get("run_id") == run_id
    ]


def _passk(
    settings: Settings, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        env=isolated_env(settings),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_misbehaving_agent_ends_its_trials_with_the_reason_and_the_rest_go_on(
    settings: Settings, tmp_path: Path
) -> None:
    plan = {
        "debrief-billable-repair": {"hang": [1], "http_500": [2], "drop_connection": [3]},
        "debrief-follow-up-required": {"garbage": [2]},
    }
    run_id = "e2e-bad-agent"
    with reference_product(tmp_path, plan) as (port, db):
        result = _passk(
            settings,
            "run",
            "--scenarios",
            str(SCENARIOS),
            "--target",
            str(target(tmp_path, port, db, "http", timeout_s=2)),
            "--run-id",
            run_id,
            "--concurrency",
            "8",
            "--json",
            "--publish",
        )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    events = {e["trial_id"]: e for e in _conversations(settings, run_id, 17)}
    assert len(events) == 17  # 3+3+3+3+5: every trial ran and was published
    wanted = {
        f"{run_id}:debrief-billable-repair:001": ("timeout", "no agent reply within 2 s"),
        f"{run_id}:debrief-billable-repair:002": ("agent_error", "HTTP 500"),
        f"{run_id}:debrief-billable-repair:003": ("agent_error", "closed the connection"),
        f"{run_id}:debrief-follow-up-required:002": ("agent_error", "not JSON"),
    }
    for trial_id, event in events.items():
        if trial_id in wanted:
            exit_reason, reason = wanted[trial_id]
            assert event["exit_reason"] == exit_reason, event
            assert reason in event["harness_error"], event
            assert event["metrics"]["turns"] == 5  # two full exchanges, then the third
        else:
            assert event["exit_reason"] in ("product_closed", "handed_off"), event
            assert "harness_error" not in event
    # the summary says so: exits counted, each reason listed with its trial
    summary = json.loads(result.stdout)
    assert summary["exits"]["timeout"] == 1 and summary["exits"]["agent_error"] == 3, summary
    assert sum(summary["exits"].values()) == summary["run"] == summary["published"] == 17
    assert {e["trial_id"] for e in summary["errors"]} == set(wanted)
    for trial_id, (_, reason) in wanted.items():
        assert any(trial_id in line and reason in line for line in result.stderr.splitlines())


def test_same_run_id_adds_nothing_and_sigint_leaves_no_half_trial(
    settings: Settings, tmp_path: Path
) -> None:
    run_id = "e2e-rerun"
    # Trials 2 and 3 hang at their third reply: a SIGINT finds them mid-conversation.
    hang = {s.stem: {"hang": [2, 3]} for s in SCENARIOS.glob("*.yaml")}
    with reference_product(tmp_path / "first", hang) as (port, db):
        target_file = target(tmp_path, port, db, "http", timeout_s=120)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli",
                "run",
                "--scenarios",
                str(SCENARIOS),
                "--target",
                str(target_file),
                "--run-id",
                run_id,
                "--concurrency",
                "17",
                "--json",
                "--publish",
            ],
            cwd=ROOT,
            env=isolated_env(settings),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # 17 trials; trials 2 and 3 of the four debriefs hang (8); the quick questions close
        # at reply 1, before any hang: 9 finish.
        finished = _conversations(settings, run_id, min_count=9, timeout=60)
        assert len(finished) == 9
        in_flight = (
            sqlite3.connect(db)
            .execute(
                "SELECT count(*) FROM sessions WHERE state IS NULL "
                "AND scenario_id != 'debrief-quick-question'"
            )
            .fetchone()[0]
        )
        assert in_flight == 8  # trials 2 and 3 of four scenarios, hanging
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    stopped = json.loads(out)
    assert (stopped["published"], stopped["interrupted"]) == (9, 8), stopped
    first = _conversations(settings, run_id)
    assert sorted(e["trial_id"] for e in first) == sorted(e["trial_id"] for e in finished)
    sessions = _sessions(settings, run_id)
    # whole trials only: a session for every filed conversation and none without one
    assert {s["trial_id"] for s in sessions} == {
        e["trial_id"] for e in first if e["scenario_id"] != "debrief-quick-question"
    }

    # The same run id again (the product fixed): only the missing trials run.
    with reference_product(tmp_path / "second", {}) as (port, db):
        second = _passk(
            settings,
            "run",
            "--scenarios",
            str(SCENARIOS),
            "--target",
            str(target(tmp_path, port, db, "http")),
            "--run-id",
            run_id,
            "--json",
            "--publish",
        )
        assert second.returncode == 0, second.stderr
        again = json.loads(second.stdout)
        assert (again["skipped"], again["run"], again["published"]) == (9, 8, 8), again
        third = _passk(
            settings,
            "run",
            "--scenarios",
            str(SCENARIOS),
            "--target",
            str(target(tmp_path, port, db, "http")),
            "--run-id",
            run_id,
            "--json",
            "--publish",
        )
        assert third.returncode == 0, third.stderr
        done = json.loads(third.stdout)
        assert (done["skipped"], done["run"], done["published"]) == (17, 0, 0), done
    time.sleep(0)  # nothing to wait for: the sends were acknowledged before exit
    every = _conversations(settings, run_id, min_count=17)
    ids = [e["trial_id"] for e in every]
    assert len(ids) == len(set(ids)) == 17  # each trial once in the log, none twice
    assert len(_sessions(settings, run_id)) == 14  # the quick questions file nothing


def test_invalid_target_and_down_broker_are_one_line_errors(
    tmp_path: Path, settings: Settings
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("agent: {kind: http, url: 'http://x', timeout: 3}\n")
    result = _passk(
        settings, "run", "--scenarios", str(SCENARIOS), "--target", str(bad), "--run-id", "x"
    )
    assert result.returncode == 2
    assert f"{bad}: field agent.timeout: unknown field" in result.stderr
    env = {**isolated_env(settings), "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}"}
    good = ROOT / "examples" / "agent" / "target-http.yaml"
    down = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "run",
            "--scenarios",
            str(SCENARIOS),
            "--target",
            str(good),
            "--run-id",
            "x",
            "--wait",
            "1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert down.returncode == 4 and "Traceback" not in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1 and "no Kafka broker" in down.stderr
