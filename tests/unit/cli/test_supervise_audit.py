"""`make up` supervises the continuous auditor beside the workers, with its /metrics."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from services.cli.main import app


def test_the_auditor_is_supervised_with_its_metrics_port(tmp_path: Path) -> None:
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
    block = out.read_text().split("[program:audit]")[1].split("[program:")[0]
    assert "worker audit" in block and 'PASSK_METRICS_PORT="9471"' in block
