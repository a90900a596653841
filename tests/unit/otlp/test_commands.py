"""`passk import otel --dry-run` (no broker needed), and the worker's place under `make up`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from services.cli import SERVERS, WORKERS, app
from tests.unit.otlp.spans import agent_trace, request
from tests.unit.otlp.test_decode import _otlp_json


def test_dry_run_maps_and_tables_taken_and_skipped(tmp_path: Path) -> None:
    good, no_ids = agent_trace(1), agent_trace(2, {"passk.run_id": ""})
    lines = tmp_path / "traces.jsonl"
    lines.write_text(json.dumps(_otlp_json(request(*good))) + "\n"
                     + json.dumps(_otlp_json(request(*no_ids))) + "\n"
                     + json.dumps(_otlp_json(request(*agent_trace(3)[:-1]))) + "\n")
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
    result = CliRunner().invoke(app, ["supervise", "config", "--out", str(out), "--log-dir",
                                      str(tmp_path / "logs"), "--metrics-base", "9464"])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "[program:otlp]" in text and "worker otlp" in text
    assert SERVERS == ("otlp",)
    block = text.split("[program:otlp]")[1]
    assert f'PASSK_METRICS_PORT="{9464 + len(WORKERS)}"' in block
