"""`passk review` binds 127.0.0.1 unless told otherwise (the broker and the server are
stood in for: only the address the app would be served on is looked at)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from services.contract import settings as settings_module


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """The (host, port) `passk review` hands the server, with no settings file read, a
    projection in tmp_path, a free port (0), and no broker needed."""
    bound: list[tuple[str, int]] = []

    async def serve(settings: Any, trial_view: Any, *, host: str, port: int) -> None:
        bound.append((host, port))

    monkeypatch.setenv("PASSK_ENV_FILE", "")
    monkeypatch.setenv("PASSK_DATABASE_URL", f"sqlite:///{tmp_path / 'p.db'}")
    monkeypatch.setenv("PASSK_REVIEW_PORT", "0")
    monkeypatch.setattr("services.review.app.serve", serve)
    monkeypatch.setattr("services.kafka.reach.require_broker", lambda wait, settings: None)
    settings_module.get_settings.cache_clear()
    try:
        yield bound
    finally:
        settings_module.get_settings.cache_clear()


def test_the_settings_default_host_is_the_loopback() -> None:
    assert settings_module.Settings().review_host == "127.0.0.1"


def test_passk_review_binds_127_0_0_1_by_default(served: list[tuple[str, int]]) -> None:
    result = CliRunner().invoke(app, ["review"])
    assert result.exit_code == 0, result.output
    assert served == [("127.0.0.1", 0)]


def test_passk_review_binds_elsewhere_only_when_told(
    served: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    result = CliRunner().invoke(app, ["review", "--host", "127.0.0.2"])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("PASSK_REVIEW_HOST", "127.0.0.3")
    settings_module.get_settings.cache_clear()
    result = CliRunner().invoke(app, ["review"])
    assert result.exit_code == 0, result.output
    assert served == [("127.0.0.2", 0), ("127.0.0.3", 0)]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "-1"], "--port -1 is outside 0-65535"),
        (["--port", "70000"], "--port 70000 is outside 0-65535"),
        (["--host", "999.1.1.1"], "cannot listen on 999.1.1.1:0"),
        (["--host", "nonsense.invalid"], "cannot listen on nonsense.invalid:0"),
    ],
)
def test_an_address_it_cannot_listen_on_is_a_one_line_usage_error(
    served: list[tuple[str, int]], args: list[str], said: str
) -> None:
    result = CliRunner().invoke(app, ["review", *args])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: ") and said in line, line
    assert served == []


def test_a_host_from_the_settings_that_does_not_resolve_is_named(
    served: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PASSK_REVIEW_HOST", "nonsense.invalid")
    settings_module.get_settings.cache_clear()
    result = CliRunner().invoke(app, ["review"])
    assert result.exit_code == 2, result.output
    assert "error: passk review cannot listen on nonsense.invalid:0" in result.output
    assert served == []


@pytest.mark.parametrize(
    ("tokens", "said"),
    [
        (" , ,", "PASSK_REVIEW_TOKENS is set but names no reviewer"),
        ("ann:ann-token-7f3a,bob:short-bob", "reviewer 'bob''s token is shorter than 12"),
    ],
)
def test_tokens_naming_nobody_or_too_short_stop_it_before_it_starts(
    served: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch, tokens: str, said: str
) -> None:
    monkeypatch.setenv("PASSK_REVIEW_TOKENS", tokens)
    settings_module.get_settings.cache_clear()
    result = CliRunner().invoke(app, ["review"])
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: ") and said in line, line
    assert "short-bob" not in line and "7f3a" not in line
    assert served == []
