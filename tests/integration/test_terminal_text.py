"""`passk show`, `report` and `windows` print what events hold as text: an ESC, a bell or a
carriage return in a transcript, a judge's reason or an id never reaches the terminal as
itself, and rich markup in them is printed as written, not obeyed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from schemas.events import Message
from services.storage.store import Store
from tests.support import ROOT
from tests.unit.storage import factories as f

RUN = "terminal-1"
TITLE = "\x1b]0;owned\x07"  # would set the terminal's window title
CLEAR = "\x1b[2J\x1b[H"  # would clear the screen
FORGED = "ok\rFORGED"  # would overwrite the start of the line
MARKUP = "[bold red]not bold[/bold red]"
SCENARIO = f"s{TITLE}"


def seed(url: str) -> None:
    store = Store(url)
    conv = f.conversation("t0", run_id=RUN, scenario_id=SCENARIO, when=1)
    conv = conv.model_copy(
        update={
            "transcript": [
                *conv.transcript,
                Message(role="user", content=f"{CLEAR}{MARKUP} {FORGED}"),
            ]
        }
    )
    store.apply(conv)
    judge = f.judge("t0", "polite", "failed", run_id=RUN, scenario_id=SCENARIO)
    store.apply(judge.model_copy(update={"reason": f"rude {TITLE}{MARKUP}"}))
    store.apply(
        f.verdict(
            "t0",
            "failed",
            run_id=RUN,
            scenario_id=SCENARIO,
            when=2,
            failed=[("judge:polite", f"rude {TITLE}{MARKUP}")],
        )
    )
    store.close()


def passk(url: str, *args: str) -> str:
    env = {**os.environ, "PASSK_DATABASE_URL": url, "COLUMNS": "300"}
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


def test_show_and_report_print_controls_visibly_and_markup_as_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'passk.db'}"
    seed(url)
    for args in (("show", "t0"), ("report", "--run-id", RUN)):
        out = passk(url, *args)
        assert "t0" in out or "s\\x1b" in out, out
        for raw in ("\x1b", "\x07", "\r"):
            assert raw not in out, (args, repr(out))
        assert "\\x1b" in out  # shown, escaped
    shown = passk(url, "show", "t0")
    assert MARKUP in shown  # printed as written
    assert "\\x1b[2J" in shown and "ok\\x0dFORGED" in shown
