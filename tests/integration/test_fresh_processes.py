"""Checks that need a Python process of their own: what importing passk does to a Faust
it refuses, and `python -m schemas.generate --check` (what `make schemas` runs) on the
committed files. Moved from tests/unit, which starts no process."""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT


def test_another_version_installs_no_patch() -> None:
    """In a fresh process: the refusal comes before any patch is installed."""
    script = (
        "import faust\n"
        "faust.__version__ = '0.16.0'\n"
        "from services.runtime import faust_compat\n"
        "assert not any(faust_compat.applied().values()), 'patched on import'\n"
        "try:\n"
        "    faust_compat.apply()\n"
        "except faust_compat.FaustVersionError:\n"
        "    print(sorted(n for n, on in faust_compat.applied().items() if on))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_check_command_exits_zero_on_the_committed_files() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "schemas.generate", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "up to date" in done.stdout
