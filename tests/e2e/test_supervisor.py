"""`make up` runs the workers under supervisord: a worker that dies is started again,
and `passk status` says how often."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from services.cli.status import processor_status
from services.contract.processors import WORKERS, metrics_ports
from services.contract.settings import Settings
from services.runtime.outage import health_path, read_health
from tests.e2e.conftest import BIN, supervise_config, supervised_pid, supervisord
from tests.support import ROOT, isolated_env, wait_for

pytestmark = pytest.mark.e2e


def test_generated_config_supervises_every_worker_with_its_metrics_port(tmp_path: Path) -> None:
    conf = tmp_path / "run" / "supervisord.conf"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "supervise",
            "config",
            "--out",
            str(conf),
            "--log-dir",
            str(tmp_path / "log"),
            "--metrics-base",
            "11500",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    text = conf.read_text()
    ports = metrics_ports(WORKERS, 11500)
    for worker in WORKERS:  # a worker added to the registry is supervised too
        section = text.split(f"[program:{worker}]")[1].split("[program:")[0]
        assert f"worker {worker}\n" in section
        assert f'PASSK_METRICS_PORT="{ports[worker]}"' in section
        assert "autorestart=true" in section
    assert "judge-standin" not in text


def test_secrets_without_users_are_a_usage_error(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "supervise",
            "config",
            "--out",
            str(tmp_path / "supervisord.conf"),
            "--log-dir",
            str(tmp_path / "log"),
            "--kafka-secrets",
            str(tmp_path / "no-secrets"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "no users.json" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "supervisord.conf").exists()


def test_a_killed_worker_is_restarted_and_status_counts_it(
    settings: Settings, tmp_path: Path
) -> None:
    run, logs = settings.data_dir / "run", tmp_path / "log"  # where status asks supervisord
    env = isolated_env(settings)
    conf = run / "supervisord.conf"
    supervise_config(conf, logs, env, "--metrics-base", "0", "--only", "sink")

    def sink_pid() -> int | None:
        return supervised_pid(conf, "sink")

    with supervisord(conf, env):
        first = wait_for(sink_pid, timeout=120, what="sink RUNNING under supervisord")
        health = health_path(settings.data_dir, "sink")
        wait_for(
            lambda: (read_health(health) or {}).get("pid") == first,
            timeout=120,
            what="the sink's health file",
        )
        os.kill(first, signal.SIGKILL)  # a crash: no shutdown hooks
        second = wait_for(
            lambda: (p := sink_pid()) is not None and p != first and p,
            timeout=120,
            what="sink restarted by supervisord",
        )
        wait_for(
            lambda: (read_health(health) or {}).get("pid") == second,
            timeout=120,
            what="the restarted sink's health file",
        )
        [status] = processor_status(["sink"], settings)
        assert status.restarts == 1
        assert status.degraded == ()
        assert status.down is None, status
        # stopped for good: `passk status` says it is down, not only how often it restarted
        subprocess.run(
            [str(BIN / "supervisorctl"), "-c", str(conf), "stop", "sink"],
            capture_output=True,
            timeout=120,
            check=True,
        )
        shown = subprocess.run(
            [sys.executable, "-m", "services.cli", "status", "--processors", "sink", "--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.returncode == 1, shown.stdout + shown.stderr
        [row] = json.loads(shown.stdout)["processors"]
        assert (row["processor"], row["healthy"]) == ("sink", False), row
        assert row["health"].startswith("DOWN: supervisor says STOPPED"), row
