"""`make test` relies on pytest-xdist's `--dist loadgroup` keeping an `xdist_group` on one
worker (the shared pipeline's tests, a module's own broker). Some pytest and pytest-xdist
pairs silently drop the groups (pytest-dev/pytest-xdist#1386): this runs the pinned pair on
a tiny suite and fails if a group's module fixture is set up more than once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SUITE = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("one_broker")


@pytest.fixture(scope="module")
def broker():
    with open(os.environ["SETUPS"], "a") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    yield


@pytest.mark.parametrize("i", range(6))
def test_grouped(broker, i):
    pass
"""
LOOSE = "\n".join(f"def test_loose_{i}():\n    pass\n" for i in range(12))


def test_a_group_runs_on_one_worker_with_one_module_setup(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(SUITE)
    (tmp_path / "test_loose.py").write_text(LOOSE)
    setups = tmp_path / "setups"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "3",
            "--dist",
            "loadgroup",
            "-c",
            "/dev/null",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        cwd=tmp_path,
        env={"SETUPS": str(setups), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "18 passed" in done.stdout, done.stdout
    assert len(setups.read_text().split()) == 1, setups.read_text()
