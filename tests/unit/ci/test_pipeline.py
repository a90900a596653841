"""`passk ci` before it starts anything: the default run id, and the usage errors (exit
2, one line, nothing started) for invalid scenarios, a bad target and an unknown
baseline."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.ci.pipeline import default_run_id
from services.cli.main import app

ROOT = Path(__file__).resolve().parents[3]


def test_the_default_run_id_is_ci_and_the_utc_time() -> None:
    assert default_run_id(datetime(2026, 12, 6, 3, 4, 5, tzinfo=UTC)) == "ci-20261206T030405Z"


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No broker answers and nothing may be started: the checks come first."""
    from services.ci import pipeline
    from services.contract.settings import get_settings

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("ci started something before refusing")

    monkeypatch.setattr(pipeline, "stack_for", refuse)
    monkeypatch.setenv("PASSK_DATABASE_URL", f"sqlite:///{tmp_path / 'p.db'}")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def _ci(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["ci", *args])


def test_invalid_scenarios_are_exit_2_before_anything_starts(quiet: Path) -> None:
    done = _ci("--scenarios", str(ROOT / "examples" / "invalid"), "--target",
               str(ROOT / "examples" / "agent" / "target-http.yaml"))
    assert done.exit_code == 2, done.output
    assert "nothing was run" in str(done.exception or "") + done.output


def test_a_bad_target_is_exit_2_naming_it(quiet: Path) -> None:
    bad = quiet / "target.yaml"
    bad.write_text("agent: {kind: carrier-pigeon}\n")
    done = _ci("--scenarios", str(ROOT / "examples" / "scenarios"), "--target", str(bad))
    assert done.exit_code == 2
    assert "target.yaml" in str(done.exception or "") + done.output


def test_an_unknown_baseline_is_exit_2_before_anything_starts(quiet: Path) -> None:
    done = _ci("--scenarios", str(ROOT / "examples" / "scenarios"), "--target",
               str(ROOT / "examples" / "agent" / "target-http.yaml"), "--baseline", "nope")
    assert done.exit_code == 2
    assert "--baseline 'nope'" in str(done.exception or "") + done.output
