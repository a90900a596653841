"""`passk run`'s adaptive options refused as usage errors (exit 2) before anything is
published or any broker is asked: an option that only --adaptive reads given without it,
a --goal that is not strictly between 0 and 1, and a --budget below the trials every
scenario first gets."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from tests.support import ROOT

SCENARIOS = ROOT / "examples" / "scenarios"  # five scenarios, k = 3, 3, 3, 3, 5
TARGET = ROOT / "examples" / "agent" / "target-http.yaml"
A = ["--adaptive", "--budget", "40"]


@pytest.fixture
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    import services.kafka.reach as reach

    def asked(*args: object, **kwargs: object) -> None:
        raise AssertionError("a broker was asked for: the options were not checked first")

    monkeypatch.setattr(reach, "require_broker", asked)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--credibility", "0.95"], "--credibility given without --adaptive"),
        (["--verdict-timeout", "30"], "--verdict-timeout given without --adaptive"),
        (["--budget", "9", "--batch", "2"], "--budget, --batch given without --adaptive"),
        (A + ["--goal", "0"], "--goal must be a number between 0 and 1 exclusive (got 0.0)"),
        (A + ["--goal", "1"], "--goal must be a number between 0 and 1 exclusive (got 1.0)"),
        (A + ["--goal", "nan"], "--goal must be a number between 0 and 1 exclusive (got nan)"),
        (
            ["--adaptive", "--budget", "6", "--publish"],
            "--budget 6 is below the 17 trials the 5 scenario(s) first get (the sum of "
            "their k: 3 + 3 + 3 + 3 + 5)",
        ),
        (
            ["--adaptive", "--budget", "20", "--trials", "4"],
            "--budget 20 is below the 21 trials the 5 scenario(s) first get (the sum of "
            "their max(--trials 4, k): 4 + 4 + 4 + 4 + 5)",
        ),
    ],
)
def test_run_refuses_adaptive_options_that_cannot_hold(
    no_broker: None, args: list[str], said: str
) -> None:
    done = CliRunner().invoke(
        app,
        ["run", "--scenarios", str(SCENARIOS), "--target", str(TARGET), "--run-id", "r1", *args],
    )
    assert done.exit_code == 2, done.output
    assert said in " ".join(done.output.split())  # rich wraps long lines
