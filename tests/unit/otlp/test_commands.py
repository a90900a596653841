"""`passk import otel --dry-run` (no broker needed), and the worker's place under `make up`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from services.cli.main import app
from services.contract.processors import SERVERS
from tests.unit.otlp.spans import agent_trace, otlp_json, request


def test_dry_run_maps_and_tables_taken_and_skipped(tmp_path: Path) -> None:
    good, no_ids = agent_trace(1), agent_trace(2, {"passk.run_id": ""})
    lines = tmp_path / "traces.jsonl"
    lines.write_text(
        json.dumps(otlp_json(request(*good)))
        + "\n"
        + json.dumps(otlp_json(request(*no_ids)))
        + "\n"
        + json.dumps(otlp_json(request(*agent_trace(3)[:-1])))
        + "\n"
    )
    result = CliRunner().invoke(app, ["import", "otel", str(lines), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would take (trials)" in result.output
    assert "skipped: no_passk_ids" in result.output and "skipped: incomplete" in result.output


def test_nothing_to_take_exits_3(tmp_path: Path) -> None:
    pb = tmp_path / "t.binpb"
    pb.write_bytes(request(*agent_trace(1, {"gen_ai.operation.name": "chat"})).SerializeToString())
    result = CliRunner().invoke(app, ["import", "otel", str(pb), "--dry-run"])
    assert result.exit_code == 3, result.output


def test_the_otlp_worker_is_supervised_after_the_processors(tmp_path: Path) -> None:
    out = tmp_path / "supervisord.conf"
    result = CliRunner().invoke(
        app,
        [
            "supervise",
            "config",
            "--out",
            str(out),
            "--log-dir",
            str(tmp_path / "logs"),
            "--metrics-base",
            "9464",
        ],
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "[program:otlp]" in text and "worker otlp" in text
    assert SERVERS[0] == "otlp"
    block = text.split("[program:otlp]")[1]
    assert 'PASSK_METRICS_PORT="9470"' in block  # after the six workers' 9464-9469


def test_a_target_files_state_probe_reads_the_sessions_a_trace_lacks(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "product.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE sessions (id TEXT, state TEXT, exit TEXT)")
        conn.execute(
            "INSERT INTO sessions VALUES ('sess-1', ?, 'product_closed')",
            (json.dumps({"report": {"fault": "pump"}}),),
        )
    target = tmp_path / "target.yaml"
    target.write_text(
        "agent: {kind: http, url: 'http://127.0.0.1:1/chat'}\n"
        f"state: {{kind: sql, url: 'sqlite:///{db}', wait_s: 0.3, exit_column: exit,\n"
        "        query: 'SELECT state, exit FROM sessions WHERE id = :session_id'}\n"
    )
    other = agent_trace(2)
    for kv in other[-1].attributes:
        if kv.key == "session.id":
            kv.value.string_value = "sess-unknown"
        elif kv.key == "passk.trial_id":
            kv.value.string_value = "t-2"
    pb = tmp_path / "t.binpb"
    pb.write_bytes(request(*agent_trace(1), *other).SerializeToString())
    result = CliRunner().invoke(
        app, ["import", "otel", str(pb), "--dry-run", "--state-probe", str(target)]
    )
    assert result.exit_code == 0, result.output
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in result.output.splitlines()
        if line.count("│") == 3
    }
    assert rows["of which read by the state probe"] == "1"
    assert rows["no session from the state probe"] == "1"
    assert "no persisted session for t-2" in result.output
    import asyncio

    from services.harness.probes import make_probe
    from services.harness.target import load_target
    from services.otlp.importer import plan_import, probe_sessions

    plan = plan_import([pb])
    reader = make_probe(load_target(target).state)
    asyncio.run(probe_sessions(plan, reader))
    sessions = {t.conversation.session_id: t.session for t in plan.taken}
    assert sessions["sess-1"] is not None and sessions["sess-1"].state == {
        "report": {"fault": "pump"}
    }
    assert sessions["sess-1"].exit_reason == "product_closed"
    assert sessions["sess-1"].event_id == f"otel:{1:032x}:session"
    assert sessions["sess-unknown"] is None
    assert [trial for trial, _ in plan.not_probed] == ["t-2"]


def test_a_target_without_a_probe_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "target.yaml"
    target.write_text("agent: {kind: http, url: 'http://127.0.0.1:1/chat'}\n")
    pb = tmp_path / "t.binpb"
    pb.write_bytes(request(*agent_trace(1)).SerializeToString())
    result = CliRunner().invoke(
        app, ["import", "otel", str(pb), "--dry-run", "--state-probe", str(target)]
    )
    assert result.exit_code == 2


def test_dry_run_json_counts_what_it_would_take_and_skip(tmp_path: Path) -> None:
    lines = tmp_path / "traces.jsonl"
    lines.write_text(
        json.dumps(otlp_json(request(*agent_trace(1))))
        + "\n"
        + json.dumps(otlp_json(request(*agent_trace(2, {"passk.run_id": ""}))))
        + "\n"
        + json.dumps(otlp_json(request(*agent_trace(3)[:-1])))
        + "\n"
    )
    result = CliRunner().invoke(app, ["import", "otel", str(lines), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    said = json.loads(result.stdout)
    assert (said["dry_run"], said["taken"], said["acknowledged"]) == (True, 1, None)
    assert said["skipped"] == {"incomplete": 1, "no_passk_ids": 1}
    assert said["spans"] == len(agent_trace(1)) + len(agent_trace(2)) + len(agent_trace(3)) - 1
