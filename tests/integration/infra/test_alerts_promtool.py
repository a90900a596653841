"""The alert rules through Debian's `promtool` (package `prometheus`; `.ci/run` installs
it, and a machine without it skips these with the reason): the rules file is valid, and
each group's unit tests in promtool/ pass. That every alert has such a test is checked
without promtool, in tests/unit/infra/test_alerts.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import installed_tool

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "infra" / "prometheus" / "alerts.yml"
TESTS = Path(__file__).parent / "promtool"


def promtool() -> str:
    return installed_tool("promtool", "prometheus")


def test_the_rules_file_is_valid() -> None:
    done = subprocess.run(
        [promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("test_file", sorted(TESTS.glob("*.test.yml")), ids=lambda p: p.name)
def test_promtool_unit_tests_pass(test_file: Path) -> None:
    done = subprocess.run(
        [promtool(), "test", "rules", test_file.name],
        cwd=TESTS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
