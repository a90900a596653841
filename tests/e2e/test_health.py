"""Health that tells the truth (issue 21, item 6), with the red team's two cases: the judge
worker stopped with `kill -STOP` (status said `ok`, and exit 1 only once its group emptied)
and a lock on the sink's SQLite file (status said `ok` with lag 180; the sink's outage
warning logged the SQL parameters, transcript text included). Real broker, real workers,
`passk status` run as an operator runs it."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.events import Message
from services.common.codec import encode
from services.common.outage import health_path, read_health
from services.common.settings import Settings
from services.common.topics import Topic
from tests.support import (
    ROOT,
    isolated_env,
    produce,
    publish_scenarios,
    running,
    settled,
    wait_for,
)
from tests.unit.factories import conversation, scenario, session

pytestmark = pytest.mark.e2e
SECRET = "hunter2-in-the-transcript"


def status(settings: Settings, processor: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "status", "--processors", processor],
        env=isolated_env(settings, COLUMNS="250"), cwd=ROOT, capture_output=True, text=True,
        timeout=120)


def row(done: subprocess.CompletedProcess[str], processor: str) -> str:
    return next(line for line in done.stdout.splitlines() if line.strip("│ ").startswith(processor))


def shows(settings: Settings, processor: str, health: str, code: int) -> bool | str:
    done = status(settings, processor)
    line = row(done, processor)
    return (health in line and done.returncode == code) or f"exit {done.returncode}: {line}"


def beating(settings: Settings, processor: str) -> bool:
    return "beat_at" in (read_health(health_path(settings.data_dir, processor)) or {})


def test_a_stopped_judge_worker_is_stalled_not_ok_and_ok_again_when_continued(
        settings: Settings, tmp_path: Path) -> None:
    log = tmp_path / "judge.log"
    with running(["worker", "judge"], isolated_env(settings), log) as judge:
        wait_for(lambda: settled(settings, ["judge"]) and beating(settings, "judge"),
                 timeout=120, what="judge joined and beating")
        wait_for(lambda: shows(settings, "judge", "ok", 0), timeout=30, what="judge ok")
        os.kill(judge.pid, signal.SIGSTOP)
        try:
            # lag grows while it is stopped
            produce(settings, Topic.CONVERSATION_FINISHED,
                    [(f"s-{i}", encode(conversation(f"t{i}"))) for i in range(5)])
            wait_for(lambda: shows(settings, "judge", "stalled: no heartbeat", 1), timeout=90,
                     what="status says the stopped judge is stalled, exit 1")
        finally:
            os.kill(judge.pid, signal.SIGCONT)
        wait_for(lambda: shows(settings, "judge", "ok", 0), timeout=180,
                 what="ok again once it runs")


def test_a_locked_store_makes_the_sink_degraded_and_its_log_keeps_no_parameters(
        settings: Settings, tmp_path: Path) -> None:
    publish_scenarios(settings, [scenario()])
    db = Path(settings.database_url.removeprefix("sqlite:///"))
    log = tmp_path / "sink.log"
    with running(["worker", "sink"], isolated_env(settings), log):
        wait_for(lambda: settled(settings, ["sink"]) and beating(settings, "sink") and db.exists(),
                 timeout=120, what="sink joined, beating, tables made")
        wait_for(lambda: shows(settings, "sink", "ok", 0), timeout=30, what="sink ok")
        lock = sqlite3.connect(db, isolation_level=None, timeout=5)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            secret = conversation("locked", transcript=[
                Message(role="user", content=f"my password is {SECRET}"),
                Message(role="assistant", content="noted")])
            produce(settings, Topic.CONVERSATION_FINISHED, [("s-locked", encode(secret))])
            produce(settings, Topic.SESSION_PERSISTED, [("s-locked", encode(session("locked")))])
            wait_for(lambda: shows(settings, "sink", "degraded: store down", 1), timeout=60,
                     what="status says the sink is degraded, exit 1")
            # SQLite gives up after its 30 s busy timeout: the outage's one warning
            wait_for(lambda: "database is locked" in log.read_text(errors="replace"),
                     timeout=90, what="the sink's outage warning")
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        wait_for(lambda: shows(settings, "sink", "ok", 0), timeout=120, what="ok again")
        wait_for(lambda: settled(settings, ["sink"]), timeout=60, what="caught up")
    text = log.read_text(errors="replace")
    assert "store unreachable" in text and "INSERT" in text, text[-3000:]
    assert SECRET not in text
    with sqlite3.connect(db) as check:  # nothing lost: the transcript is in the projection
        stored = check.execute("SELECT count(*) FROM transcripts").fetchone()
    assert stored == (1,)
