"""`passk run` against a product whose state store never answers: a SQL probe's query that
never returns ends the trial at the probe's `wait_s` (no SessionPersisted), and SIGINT
stops the run within seconds with its summary. Before, the query ran in asyncio's
executor, which the run waited for at its end: 10 minutes past a 5 s wait, SIGINT or not."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.support import ROOT, isolated_env, read_topic, wait_for

pytestmark = pytest.mark.integration

SCENARIO = """\
id: stuck-probe
trials: 2
expected_exit: product_closed
outcome:
  - {path: done, equals: true}
user:
  script: ["one", "two", "three", "four"]
"""
# A read-only query that never returns: it counts an endless recursive sequence.
TARGET = """\
agent: {{kind: python, callable: "tests.e2e.slow_agent:closes_on_third", timeout_s: 10}}
state:
  kind: sql
  url: "sqlite:///{db}"
  query: >-
    WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)
    SELECT count(*) AS n, '{{}}' AS state FROM c WHERE :session_id IS NOT NULL
  wait_s: {wait_s}
"""


def _files(tmp_path: Path, wait_s: float) -> tuple[Path, Path]:
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir(exist_ok=True)
    (scenarios / "stuck-probe.yaml").write_text(SCENARIO)
    db = tmp_path / "product.db"
    sqlite3.connect(db).close()
    target = tmp_path / f"target-{wait_s:g}.yaml"
    target.write_text(TARGET.format(db=db, wait_s=wait_s))
    return scenarios, target


def _run(
    settings: Settings,
    scenarios: Path,
    target: Path,
    run_id: str,
    closed: Path,
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli",
            "run",
            "--publish",
            "--scenarios",
            str(scenarios),
            "--target",
            str(target),
            "--run-id",
            run_id,
        ],
        env=isolated_env(settings, COLUMNS="200", PASSK_TEST_CLOSED_LOG=str(closed)),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_probe_that_never_answers_ends_the_trial_at_wait_s(
    settings: Settings,
    tmp_path: Path,
) -> None:
    scenarios, target = _files(tmp_path, wait_s=3)
    started = time.monotonic()
    run = _run(settings, scenarios, target, "stuck", tmp_path / "closed.log")
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, out + err
    assert time.monotonic() - started < 60  # two trials at once: one wait of 3 s each
    assert "Traceback" not in err
    conversations = [
        v for _, v, _ in read_topic(settings, Topic.CONVERSATION_FINISHED, min_count=2)
    ]
    assert {c["trial_id"] for c in conversations} == {
        "stuck:stuck-probe:001",
        "stuck:stuck-probe:002",
    }
    assert {c["state_probe"] for c in conversations} == {
        "the state probe did not answer within 3 s"
    }
    assert read_topic(settings, Topic.SESSION_PERSISTED) == []  # no session, as the contract says


def test_sigint_stops_a_run_stuck_in_its_probe(settings: Settings, tmp_path: Path) -> None:
    scenarios, target = _files(tmp_path, wait_s=600)
    closed = tmp_path / "closed.log"
    run = _run(settings, scenarios, target, "stopped", closed)
    try:
        # both conversations closed: both trials are in their probe's endless query
        wait_for(
            lambda: closed.exists() and len(closed.read_text().split()) == 2,
            timeout=60,
            what="both trials probing",
        )
        asked = time.monotonic()
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
        assert time.monotonic() - asked < 20, err
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, out + err
    assert "stopped: 0 trial(s) published, 2 not run (nothing of them sent)" in err
    assert "Traceback" not in err
    assert read_topic(settings, Topic.CONVERSATION_FINISHED) == []
