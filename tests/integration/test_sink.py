"""The sink worker through the real broker, then `passk report`, `passk gate` and
`passk rebuild` as an operator runs them; on SQLite and (when configured) PostgreSQL."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest

from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.storage.store import Store
from tests.integration.test_store_postgres import fresh_schema, postgres_url
from tests.support import ROOT, isolated_env, produce, read_topic, running, settled, wait_for
from tests.unit.storage import factories as f

pytestmark = pytest.mark.integration

TOPIC_OF = {
    "conversation_finished": Topic.CONVERSATION_FINISHED,
    "gate_result": Topic.GATE_RESULTS,
    "judge_verdict": Topic.JUDGE_VERDICTS,
    "trial_verdict": Topic.TRIAL_VERDICTS,
    "scenario_reliability": Topic.SCENARIO_RELIABILITY,
}


def send(settings: Settings, events: list) -> None:
    by_topic: dict[Topic, list[tuple[str, bytes]]] = {}
    for ev in events:
        key = (
            ev.session_id
            if ev.type == "conversation_finished"
            else ev.scenario_id
            if ev.type == "scenario_reliability"
            else ev.trial_id
        )
        by_topic.setdefault(TOPIC_OF[ev.type], []).append((key, encode(ev)))
    for topic, records in by_topic.items():
        produce(settings, topic, records)


@contextmanager
def database(backend: str, tmp_path: Path, name: str) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / f'{name}.db'}"
    else:
        with fresh_schema(postgres_url()) as url:
            yield url


def passk(settings: Settings, *args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=isolated_env(settings, PASSK_DATABASE_URL=url, COLUMNS="200"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def counts(store: Store) -> dict[str, int]:
    return {table: len(rows) for table, rows in store.dump().items()}


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sink_report_gate_and_rebuild(settings: Settings, tmp_path: Path, backend: str) -> None:
    with (
        database(backend, tmp_path, "live") as live_url,
        database(backend, tmp_path, "rebuilt") as rebuilt_url,
    ):
        run_events = f.run_events("run-1")
        ok_events = [e for e in f.run_events("run-ok") if e.scenario_id == "billing"]
        # the aggregate's records: two windows, each published twice (the newest wins,
        # whatever the order), and a run record (not kept: the summaries hold runs)
        later = f.T0 + timedelta(hours=1)
        run_record = f.window(3, passed=3, scenario="billing").model_copy(
            update={
                "window": None,
                "window_start": None,
                "window_end": None,
                "run_id": "run-1",
                "event_id": "reliability:billing:run:run-1:3",
            }
        )
        windows = [
            f.window(2, passed=2, scenario="billing"),
            f.window(1, passed=1, scenario="billing"),
            f.window(1, passed=0, failed=1, start=later, scenario="billing"),
            f.window(2, passed=0, failed=1, errors=1, start=later, scenario="billing"),
            run_record,
        ]
        # duplicates, as an at-least-once upstream delivers them
        send(settings, run_events + run_events[:10] + ok_events + windows)
        produce(settings, Topic.TRIAL_VERDICTS, [("bad-1", b"{not json")])
        refused = []
        if backend == "postgres":  # PostgreSQL text cannot hold NUL: the row is refused
            nul = f.verdict("nul\x00trial", "passed", run_id="run-1", scenario_id="billing")
            send(settings, [nul])
            refused = [("sink", "unwritable", f"{settings.topic_prefix}trial-verdicts.v1")]
        expected = {
            "trials": 10,
            "trial_attempts": 10,
            "gate_results": 20,
            "judge_verdicts": 10,
            "transcripts": 10,
            "scenario_summaries": 4,
            "scenario_windows": 2,
        }

        live = Store(live_url)
        env = isolated_env(settings, PASSK_DATABASE_URL=live_url)
        with running(["worker", "sink"], env, tmp_path / "sink.log"):
            wait_for(
                lambda: live.has_schema() and counts(live) == expected,
                timeout=120,
                what="every row in the live projection",
            )
            # redelivered while the worker runs: still one row each
            send(settings, run_events[-5:])
            wait_for(lambda: settled(settings, ["sink"]), timeout=60, what="sink caught up")
            assert counts(live) == expected

        dead = sorted(
            (v for _, v, _ in read_topic(settings, Topic.DEAD_LETTERS, min_count=1 + len(refused))),
            key=lambda d: d["reason"],
        )
        assert [(d["processor"], d["reason"], d["source_topic"]) for d in dead] == [
            ("sink", "invalid_json", f"{settings.topic_prefix}trial-verdicts.v1"),
            *refused,
        ]
        assert base64.b64decode(dead[0]["value_b64"]) == b"{not json"

        shown = passk(settings, "windows", "--json", url=live_url)
        assert shown.returncode == 0, shown.stderr
        assert [
            (w["window_start"], w["n"], w["errors"]) for w in json.loads(shown.stdout)["windows"]
        ] == [("2026-11-30T12:00:00Z", 2, 0), ("2026-11-30T13:00:00Z", 2, 1)]

        report = passk(settings, "report", "--run-id", "run-1", "--json", url=live_url)
        assert report.returncode == 0, report.stderr
        data = json.loads(report.stdout)
        figures = {
            s["scenario_id"]: (
                s["n"],
                s["passed"],
                s["failed"],
                s["pass_hat_k"],
                s["scenario_passed"],
            )
            for s in data["scenarios"]
        }
        assert figures == {
            "billing": (3, 3, 0, 1.0, True),
            "followup": (3, 2, 1, 0.0, False),
            "triage": (1, 1, 0, None, False),
        }
        failed = {t["trial_id"]: t["failed_checks"] for t in data["trials"] if t["failed_checks"]}
        assert failed == {
            "run-1-f2": [{"check": "gate:state", "reason": "state wrong in run-1-f2"}]
        }

        table = passk(settings, "report", "--run-id", "run-1", url=live_url)
        assert table.returncode == 0 and "insufficient trials" in table.stdout
        assert "checks that fail most" in table.stdout

        gate = passk(settings, "gate", "--run-id", "run-1", url=live_url)
        assert gate.returncode == 1, gate.stdout + gate.stderr
        assert "followup" in gate.stdout and "insufficient trials" in gate.stdout
        assert passk(settings, "gate", "--run-id", "run-ok", url=live_url).returncode == 0
        assert (
            passk(
                settings, "gate", "--run-id", "run-ok", "--expect-scenarios", "2", url=live_url
            ).returncode
            == 1
        )
        assert passk(settings, "gate", "--run-id", "no-such-run", url=live_url).returncode == 3
        unknown = passk(settings, "report", "--run-id", "no-such-run", url=live_url)
        assert unknown.returncode == 3 and "unknown run" in unknown.stderr

        rebuilt = passk(settings, "rebuild", "--database-url", rebuilt_url, url=live_url)
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert "invalid_json: 1" in rebuilt.stderr
        assert ("unwritable: 1" in rebuilt.stderr) is bool(refused)
        assert Store(rebuilt_url).dump() == live.dump()
        # rebuilding again starts from a fresh schema: the same rows, not doubled
        assert (
            passk(settings, "rebuild", "--database-url", rebuilt_url, url=live_url).returncode == 0
        )
        assert Store(rebuilt_url).dump() == live.dump()
