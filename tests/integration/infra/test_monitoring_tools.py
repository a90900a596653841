"""The Prometheus and Alertmanager files `make up` renders, and the compose ones, accepted
by Debian's own `promtool` and `amtool` (packages `prometheus`,
`prometheus-alertmanager`; skipped with the reason where they are not installed). What
the rendered files say is checked without them, in tests/unit/infra/test_monitoring_config.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

from services.contract.settings import PROJECT_ROOT, Settings
from services.monitoring.config import render
from tests.support import installed_tool

INFRA = PROJECT_ROOT / "infra" / "prometheus"


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings(PASSK_MONITORING_DIR=str(tmp_path), **env)  # type: ignore[arg-type]


def tool(name: str) -> str:
    return installed_tool(name, "prometheus prometheus-alertmanager")


def test_promtool_and_amtool_accept_the_rendered_and_the_compose_configs(tmp_path: Path) -> None:
    render(
        settings(tmp_path, PASSK_ALERT_WEBHOOK_URL="http://127.0.0.1:15401/hook"),
        ("gate", "verdict"),
    )
    checks = [
        [tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml")],
        [tool("promtool"), "check", "config", str(INFRA / "prometheus.compose.yml")],
        [tool("amtool"), "check-config", str(tmp_path / "alertmanager.yml")],
        [tool("amtool"), "check-config", str(INFRA / "alertmanager.compose.yml")],
    ]
    for command in checks:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (command, done.stdout + done.stderr)
