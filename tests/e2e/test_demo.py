"""`make demo` from a clean clone in a temporary folder, then `make down`: the report and
the deploy gate's answer are printed, and nothing of ours is left running."""

from __future__ import annotations

import hashlib
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


def continuous_half(clone: Path, env: dict[str, str], out: str, otlp: int) -> None:
    """The continuous half sent plain GenAI traces (no passk ids) through the receiver, and
    the production-run trials arrived with sampled figures: the sampled scenario's windows
    hold fewer sampled trials than trials, exactly the plan's (the contract's hash)."""
    plan = json.loads((clone / "var/demo/live-e2e/plan.json").read_text())["trials"]
    assert f"plain GenAI traces to http://127.0.0.1:{otlp}/v1/traces (no passk ids" in out
    assert f"all {len(plan)} traces graded as planned" in out, out[-5000:]
    assert "passk windows: n=" in out and "n_sampled=" in out, out[-5000:]
    refunds = [t for t in plan if t["scenario_id"] == "support-refunds"]
    for t in refunds:  # the contract's hash, written out here
        point = int(hashlib.sha256(t["trial_id"].encode("utf-8")).hexdigest()[:8], 16)
        assert t["sampled"] is (point < 0.5 * 2**32), t
    assert all(t["sampled"] for t in plan if t["scenario_id"] == "support-general")
    shown = subprocess.run(
        [
            str(clone / ".venv/bin/passk"),
            "windows",
            "--json",
            "--runs",
            "production-*",
            "--window",
            "1h",
            "--last",
            "24",
        ],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    windows = [
        w for w in json.loads(shown.stdout)["windows"] if w["scenario_id"] == "support-refunds"
    ]
    by_hour: dict[str, list[dict[str, object]]] = {}
    for t in refunds:
        by_hour.setdefault(t["hour"], []).append(t)
    assert {w["window_start"] for w in windows} == set(by_hour)
    for w in windows:
        mine = by_hour[w["window_start"]]
        assert (w["n"], w["n_sampled"]) == (len(mine), sum(bool(t["sampled"]) for t in mine))
        assert w["n_sampled"] < w["n"], w
        assert w["passed_sampled"] == sum(
            bool(t["sampled"]) and t["expected_outcome"] == "passed" for t in mine
        )
    # the runs of make demo's passk run half are not in the default view
    default = subprocess.run(
        [str(clone / ".venv/bin/passk"), "windows", "--json"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert default.returncode == 0, default.stderr
    assert not [
        w for w in json.loads(default.stdout)["windows"] if w["scenario_id"].startswith("debrief-")
    ]


def test_make_demo_from_a_clean_clone_then_make_down(tmp_path: Path) -> None:
    clone = tmp_path / "passk"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    standin, metrics_base, agent = free_port(), free_port_block(len(WORKERS)), free_port()
    prometheus, alertmanager = free_port(), free_port()
    otlp, webhook = free_port(), free_port()
    # PYTHONPATH too: the clone's processes must import the clone's code, whose settings
    # put its projection under the clone's var/ (not the checkout's that ran the test).
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PASSK_", "OPENAI_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
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
        # the continuous half's traces go to this stack's receiver, not another's on 4318
        PASSK_OTLP_PORT=str(otlp),
        PASSK_DEMO_WEBHOOK_PORT=str(webhook),
        PASSK_DEMO_LIVE_RUN_ID="live-e2e",
    )
    try:
        demo = subprocess.run(
            ["make", "demo"], cwd=clone, env=env, capture_output=True, text=True, timeout=1500
        )
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
        assert (
            "no_customer_charge_stated" in out and "below the bar: precision 0.50 < 0.80" in out
        ), out[-5000:]
        assert listening(standin), "the stand-in should be up while the stack runs"
        if shutil.which("prometheus") and shutil.which("prometheus-alertmanager"):
            assert f"Prometheus:   http://127.0.0.1:{prometheus}" in out, out[-3000:]
            assert f"Alertmanager: http://127.0.0.1:{alertmanager}" in out, out[-3000:]
            assert listening(prometheus) and listening(alertmanager)
        continuous_half(clone, env, out, otlp)
    finally:
        down = subprocess.run(
            ["make", "down"], cwd=clone, env=env, capture_output=True, text=True, timeout=300
        )
    assert down.returncode == 0, down.stdout + down.stderr
    assert our_processes(clone) == []
    for port in (
        standin,
        agent,
        prometheus,
        alertmanager,
        otlp,
        *range(metrics_base, metrics_base + len(WORKERS)),
    ):
        assert not listening(port), f"port {port} still open after make down"
