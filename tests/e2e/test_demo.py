"""`make demo` from a clean clone in a temporary folder, then `make down`: the report and
the deploy gate's answer are printed, and nothing of ours is left running."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from services.contract.processors import WORKERS
from tests.e2e.conftest import free_port, free_port_block
from tests.support import ROOT, new_prefix

# A clean clone installs everything first; on a loaded machine that alone takes minutes.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def our_processes(folder: Path) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(folder) in cmd:
            found.append(f"{pid}: {cmd[:200]}")
    return found


def test_make_demo_from_a_clean_clone_then_make_down(tmp_path: Path) -> None:
    clone = tmp_path / "passk"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    standin, metrics_base, agent = free_port(), free_port_block(len(WORKERS)), free_port()
    prometheus, alertmanager = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PASSK_", "OPENAI_",
                                                                     "VIRTUAL_ENV"))}
    env.update(
        PASSK_TOPIC_PREFIX=new_prefix(),  # the shared broker is reused; our topics are ours
        PASSK_STANDIN_PORT=str(standin),
        PASSK_AGENT_PORT=str(agent),
        PASSK_REVIEW_PORT=str(free_port()),  # the review app, as make up serves it
        PASSK_METRICS_PORT_BASE=str(metrics_base),
        PASSK_PROMETHEUS_URL=f"http://127.0.0.1:{prometheus}",
        PASSK_ALERTMANAGER_URL=f"http://127.0.0.1:{alertmanager}",
        PASSK_CACHE_DIR=os.environ.get("PASSK_CACHE_DIR", str(Path.home() / ".cache/passk")),
        PASSK_DEMO_RUN_ID="demo-e2e",
    )
    try:
        demo = subprocess.run(["make", "demo"], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=1500)
        out = demo.stdout + demo.stderr
        assert demo.returncode == 0, out[-5000:]
        assert "pass^k" in out and "pass@k" in out, out[-3000:]
        assert "trials got exactly their expected outcome" in out, out[-3000:]
        # The reference product's demo fault plan fails two follow-up trials (the
        # expected outcomes come from its switches), so the deploy gate must refuse the build.
        plan = json.loads((clone / "var/demo/demo-e2e/expected.json").read_text())
        flaky = [s for s in plan["scenarios"] if s["passed"] < s["n"]]
        assert [s["scenario_id"] for s in flaky] == ["debrief-follow-up-required"], plan
        assert "deploy gate: FAIL (exit 1)" in out, out[-3000:]
        assert "deploy gate: PASS" not in out
        page = clone / "var/demo/demo-e2e/report.html"
        assert f"The report page (one self-contained file; open it in a browser): {page}" in out
        assert "debrief-follow-up-required" in page.read_text()
        # a real conversation happened: `passk run` talked to the product on its port
        assert "passk run demo-e2e" in out and "exit handed_off" in out, out[-5000:]
        assert listening(agent), "the reference product should be up while the stack runs"
        # calibration decided who may fail a trial: five judges gate, one is advisory
        assert out.count("gating") >= 5 and "advisory" in out, out[-5000:]
        assert "no_customer_charge_stated" in out and \
            "below the bar: precision 0.50 < 0.80" in out, out[-5000:]
        assert listening(standin), "the stand-in should be up while the stack runs"
        if shutil.which("prometheus") and shutil.which("prometheus-alertmanager"):
            assert f"Prometheus:   http://127.0.0.1:{prometheus}" in out, out[-3000:]
            assert f"Alertmanager: http://127.0.0.1:{alertmanager}" in out, out[-3000:]
            assert listening(prometheus) and listening(alertmanager)
    finally:
        down = subprocess.run(["make", "down"], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert our_processes(clone) == []
    for port in (standin, agent, prometheus, alertmanager,
                 *range(metrics_base, metrics_base + len(WORKERS))):
        assert not listening(port), f"port {port} still open after make down"
