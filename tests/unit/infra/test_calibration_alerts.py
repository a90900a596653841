"""The calibration alert rule, unit-tested with `promtool test rules` (Debian's
`prometheus`; `.ci/run` installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TESTS = Path(__file__).parent / "promtool"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: apt-get install prometheus (.ci/run does)")
    return path


def test_rules_are_valid() -> None:
    done = subprocess.run([promtool(), "check", "rules", str(ROOT / "infra/prometheus/alerts.yml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_gating_judge_drifting_below_its_bar_alerts_and_others_do_not() -> None:
    done = subprocess.run([promtool(), "test", "rules", "passk-calibration.test.yml"],
                          cwd=TESTS, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
