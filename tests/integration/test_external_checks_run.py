"""External checks end to end from the harness: `passk run` drives a python agent that
reports checks with its replies; the gate, verdict and sink workers grade the trials
through the real broker; `passk report --json` names external:<id>."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from services.contract.settings import Settings
from services.storage.store import Store
from tests.support import ROOT, isolated_env, running, settled, wait_for

pytestmark = pytest.mark.integration

SCENARIO = """\
id: ext-run
trials: 3
expected_exit: product_closed
completion: conversation
external_checks: [pii_scan]
user:
  script: ["Job 4112.", "The pump had seized; replaced it."]
"""
TARGET = """\
agent: {kind: python, callable: "tests.integration.checking_agent:reply", timeout_s: 10}
state: {kind: none}
"""


def passk(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=isolated_env(settings, COLUMNS="200"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_passk_run_external_checks_gate_the_trial(settings: Settings, tmp_path: Path) -> None:
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "ext-run.yaml").write_text(SCENARIO)
    target = tmp_path / "target.yaml"
    target.write_text(TARGET)
    env = isolated_env(settings)
    log = tmp_path / "workers.log"
    with (
        running(["worker", "gate"], env, log),
        running(["worker", "verdict"], env, log),
        running(["worker", "sink"], env, log),
    ):
        wait_for(
            lambda: settled(settings, ["gate", "verdict", "sink"]),
            timeout=90,
            what="gate, verdict and sink workers joined",
        )
        published = passk(settings, "scenarios", "publish", str(scenarios))
        assert published.returncode == 0, published.stdout + published.stderr
        ran = passk(
            settings,
            "run",
            "--scenarios",
            str(scenarios),
            "--target",
            str(target),
            "--run-id",
            "ext",
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        store = Store(settings.database_url)
        try:
            wait_for(
                lambda: len(store.trials("ext")) == 3,
                timeout=90,
                what="three trials in the projection",
            )
        finally:
            store.close()

    shown = passk(settings, "report", "--run-id", "ext", "--json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    trials = {t["trial_id"]: t for t in report["trials"]}
    assert {
        t: (v["outcome"], [c["check"] for c in v["failed_checks"]]) for t, v in trials.items()
    } == {
        "ext:ext-run:001": ("passed", []),
        "ext:ext-run:002": ("failed", ["external:pii_scan"]),
        "ext:ext-run:003": ("passed", []),
    }
    assert trials["ext:ext-run:002"]["failed_checks"][0]["reason"] == "card number echoed"
    assert "external:pii_scan" in trials["ext:ext-run:001"]["checks_passed"]
    assert [(c["check"], c["trials"], c["failed"]) for c in report["advisory_checks"]] == [
        ("external:tone", 3, 1)
    ]
