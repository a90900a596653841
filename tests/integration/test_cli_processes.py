"""Commands run as the processes `make up` starts: what they print, what they refuse, the
configuration they write. (Moved from tests/unit: they start a Python process each.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT, stop


def test_the_judge_standin_on_port_0_prints_the_chosen_port_and_binds_locally_only() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "judge-standin", "--port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert re.search(r"stand-in \(not a model\) listening on http://127\.0\.0\.1:\d+/v1", line)
    finally:
        stop(proc)  # type: ignore[arg-type]
    refused = subprocess.run(
        [sys.executable, "-m", "services.cli", "judge-standin", "--host", "0.0.0.0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0 and "local host only" in refused.stderr


def test_make_up_supervises_the_review_app(tmp_path: Path) -> None:
    out = tmp_path / "run" / "supervisord.conf"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "supervise",
            "config",
            "--out",
            str(out),
            "--log-dir",
            str(tmp_path / "log"),
            "--review-port",
            "8711",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PASSK_REVIEW_TOKENS": "ann:s3cret-ann-token"},
    )
    assert done.returncode == 0, done.stderr
    conf = out.read_text()
    assert "[program:review]" in conf and "review --port 8711" in conf
    assert "s3cret" not in conf
