"""Health that tells the truth (issue 21, item 6), with the red team's two cases: the judge
worker stopped with `kill -STOP` (status said `ok`, and exit 1 only once its group emptied)
and a lock on the sink's SQLite file (status said `ok` with lag 180; the sink's outage
warning logged the SQL parameters, transcript text included). Real broker, real workers,
`passk status` run as an operator runs it."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from schemas.events import Message
from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.e2e.conftest import supervise_config, supervised_pid, supervisord
from tests.support import (
    isolated_env,
    passk,
    produce,
    publish_scenarios,
    read_topic,
    running,
    settled,
    wait_for,
)
from tests.unit.factories import conversation, scenario, session

pytestmark = pytest.mark.e2e
SECRET = "hunter2-in-the-transcript"


def status(settings: Settings, processor: str) -> subprocess.CompletedProcess[str]:
    return passk(settings, "status", "--processors", processor, "--json")


def health_of(done: subprocess.CompletedProcess[str], processor: str) -> str:
    """The processor's health field, or (no JSON: broker down) what status said."""
    try:
        rows = json.loads(done.stdout)["processors"]
    except ValueError:
        return done.stderr.strip()[-300:]
    return next((r["health"] for r in rows if r["processor"] == processor), "not listed")


SAID: dict[str, str] = {}  # the last health of each processor, for a failure's message


def shows(settings: Settings, processor: str, health: tuple[str, ...], code: int) -> bool:
    done = status(settings, processor)
    said = health_of(done, processor)
    SAID[processor] = f"exit {done.returncode}: {said}"
    return said.startswith(health) and done.returncode == code


def until_status(
    settings: Settings, processor: str, health: tuple[str, ...], code: int, timeout: float
) -> None:
    try:
        wait_for(
            lambda: shows(settings, processor, health, code),
            timeout=timeout,
            what=f"status of {processor}: {health!r}, exit {code}",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it said {SAID.get(processor)}") from None


def test_a_stopped_judge_worker_is_not_ok_and_is_ok_again_when_continued(
    settings: Settings, tmp_path: Path
) -> None:
    """Under supervisord, as `make up` runs it: supervisord keeps saying RUNNING."""
    publish_scenarios(settings, [scenario()])
    env = isolated_env(settings)
    conf = settings.data_dir / "run" / "supervisord.conf"  # where status asks supervisord
    supervise_config(conf, tmp_path / "log", env, "--metrics-base", "0", "--only", "judge")
    with supervisord(conf, env):
        pid = wait_for(lambda: supervised_pid(conf, "judge"), timeout=120, what="judge RUNNING")
        wait_for(lambda: settled(settings, ["judge"]), timeout=120, what="judge joined")
        # at work: it grades a trial (no model here: its llm judges answer `error`)
        produce(settings, Topic.CONVERSATION_FINISHED, [("s-first", encode(conversation("first")))])
        read_topic(settings, Topic.JUDGE_VERDICTS, min_count=1, timeout=60)
        until_status(settings, "judge", ("ok",), 0, timeout=60)
        os.kill(pid, signal.SIGSTOP)
        try:
            # its lag grows while it is stopped
            produce(
                settings,
                Topic.CONVERSATION_FINISHED,
                [(f"s-{i}", encode(conversation(f"t{i}"))) for i in range(5)],
            )
            # stalled (no heartbeat), or DOWN once it has been out of its group long enough
            until_status(
                settings, "judge", ("stalled: no heartbeat", "DOWN: no member"), 1, timeout=90
            )
            assert supervised_pid(conf, "judge") == pid  # supervisord still says RUNNING
        finally:
            os.kill(pid, signal.SIGCONT)
        until_status(settings, "judge", ("ok",), 0, timeout=180)  # ok again once it runs


def test_a_locked_store_makes_the_sink_degraded_and_its_log_keeps_no_parameters(
    settings: Settings, tmp_path: Path
) -> None:
    publish_scenarios(settings, [scenario()])
    db = Path(settings.database_url.removeprefix("sqlite:///"))
    log = tmp_path / "sink.log"
    with running(["worker", "sink"], isolated_env(settings), log):
        wait_for(
            lambda: settled(settings, ["sink"]) and db.exists(),
            timeout=120,
            what="sink joined, tables made",
        )
        until_status(settings, "sink", ("ok",), 0, timeout=30)
        lock = sqlite3.connect(db, isolation_level=None, timeout=5)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            secret = conversation(
                "locked",
                transcript=[
                    Message(role="user", content=f"my password is {SECRET}"),
                    Message(role="assistant", content="noted"),
                ],
            )
            produce(settings, Topic.CONVERSATION_FINISHED, [("s-locked", encode(secret))])
            produce(settings, Topic.SESSION_PERSISTED, [("s-locked", encode(session("locked")))])
            # within SQLite's 30 s busy timeout: before the sink's first failed write, when
            # it used to say `ok` (a call not returned in 10 s is an outage as status shows)
            until_status(settings, "sink", ("degraded: store down",), 1, timeout=25)
            # SQLite gives up after its 30 s busy timeout: the outage's one warning
            wait_for(
                lambda: "database is locked" in log.read_text(errors="replace"),
                timeout=90,
                what="the sink's outage warning",
            )
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        until_status(settings, "sink", ("ok",), 0, timeout=120)
        wait_for(lambda: settled(settings, ["sink"]), timeout=60, what="caught up")
    text = log.read_text(errors="replace")
    assert "store unreachable" in text and "INSERT" in text, text[-3000:]
    assert SECRET not in text
    with sqlite3.connect(db) as check:  # nothing lost: the transcript is in the projection
        stored = check.execute("SELECT count(*) FROM transcripts").fetchone()
    assert stored == (1,)
