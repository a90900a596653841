"""`passk ci`'s checks: the default run id, and the usage errors (exit 2) for invalid
scenarios and a bad target (before anything starts) and an unknown baseline (looked up
while a broker of its own boots, which is then stopped)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.ci.pipeline import default_run_id
from services.cli.main import app

ROOT = Path(__file__).resolve().parents[3]


def test_the_default_run_id_is_ci_and_the_utc_time() -> None:
    assert default_run_id(datetime(2026, 12, 6, 3, 4, 5, tzinfo=UTC)) == "ci-20261206T030405Z"


STACK: list[str] = []


@contextmanager
def recorded_stack(
    settings: object, *, say: object, meanwhile: Callable[[], None], **kwargs: object
) -> Iterator[None]:
    """What the real stack_for does around its caller: start, run `meanwhile` while the
    broker boots, always stop; here it only says so (and never lets the run go on)."""
    STACK.append("started")
    try:
        meanwhile()
        raise AssertionError("ci went on past a check")
        yield
    finally:
        STACK.append("stopped")


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No broker: the stack is a recording stand-in."""
    from services.ci import pipeline
    from services.contract.settings import get_settings

    STACK.clear()
    monkeypatch.setattr(pipeline, "stack_for", recorded_stack)
    monkeypatch.setenv("PASSK_DATABASE_URL", f"sqlite:///{tmp_path / 'p.db'}")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def _ci(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["ci", *args])


def test_invalid_scenarios_are_exit_2_before_anything_starts(quiet: Path) -> None:
    done = _ci(
        "--scenarios",
        str(ROOT / "examples" / "invalid"),
        "--target",
        str(ROOT / "examples" / "agent" / "target-http.yaml"),
    )
    assert done.exit_code == 2, done.output
    assert "nothing was run" in str(done.exception or "") + done.output
    assert STACK == []  # refused before anything started


def test_a_bad_target_is_exit_2_naming_it(quiet: Path) -> None:
    bad = quiet / "target.yaml"
    bad.write_text("agent: {kind: carrier-pigeon}\n")
    done = _ci("--scenarios", str(ROOT / "examples" / "scenarios"), "--target", str(bad))
    assert done.exit_code == 2
    assert "target.yaml" in str(done.exception or "") + done.output
    assert STACK == []


def test_an_unknown_baseline_is_exit_2_and_what_started_meanwhile_is_stopped(quiet: Path) -> None:
    done = _ci(
        "--scenarios",
        str(ROOT / "examples" / "scenarios"),
        "--target",
        str(ROOT / "examples" / "agent" / "target-http.yaml"),
        "--baseline",
        "nope",
    )
    assert done.exit_code == 2
    assert "--baseline 'nope'" in str(done.exception or "") + done.output
    # looked up while the broker boots, never past it: started, then stopped
    assert STACK == ["started", "stopped"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--adaptive"], "--adaptive needs --budget"),
        (["--budget", "10"], "go with --adaptive"),
        (["--goal", "0.9"], "go with --adaptive"),
    ],
)
def test_adaptive_options_are_checked_before_anything_starts(
    quiet: Path, args: list[str], said: str
) -> None:
    done = _ci(
        "--scenarios",
        str(ROOT / "examples" / "scenarios"),
        "--target",
        str(ROOT / "examples" / "agent" / "target-http.yaml"),
        *args,
    )
    assert done.exit_code == 2, done.output
    assert said in done.output
    assert STACK == []  # nothing was started
