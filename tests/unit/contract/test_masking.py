"""Issue 21, item 5: every way of writing a password into a URL is masked wherever passk
writes configuration or logs; malformed URLs and ports are refused in one line."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.exc import ArgumentError, IntegrityError

from services.contract.masking import UNPARSEABLE, mask_text, mask_url
from services.contract.runfiles import (
    NO_MODEL,
    NoJudge,
    cli_judge,
    judge_path,
    record_judge,
    write_env,
)
from services.contract.settings import Settings
from services.storage.db import engine_for, redacted

SECRET = "hunter2"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://passk:hunter2@db:5432/passk", "postgresql://passk:***@db:5432/passk"),
        ("postgresql://:hunter2@db/passk", "postgresql://:***@db/passk"),
        (
            "postgresql://db/passk?user=u&password=hunter2",
            "postgresql://db/passk?user=u&password=***",
        ),
        (
            "postgresql://db/passk?sslmode=require&PASSWORD=hunter2&x=1",
            "postgresql://db/passk?sslmode=require&PASSWORD=***&x=1",
        ),
        ("postgresql://db/passk?pass%77ord=hunter2", "postgresql://db/passk?pass%77ord=***"),
        ("postgresql://db/passk?sslpassword=hunter2", "postgresql://db/passk?sslpassword=***"),
        ("postgresql+psycopg://u:hun%40ter2@db/passk", "postgresql+psycopg://u:***@db/passk"),
        ("postgresql://u:hunter2@with@db/passk", "postgresql://u:***@db/passk"),
        ("postgresql://u:hunter2@db:abc/passk", UNPARSEABLE),
        ("postgresql://u:hunter2@[::1/passk", UNPARSEABLE),
        ("sqlite:////var/lib/passk.db", "sqlite:////var/lib/passk.db"),
        ("http://127.0.0.1:8400/v1", "http://127.0.0.1:8400/v1"),
    ],
)
def test_every_way_of_writing_a_password_is_masked(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert "hunter2" not in mask_text(f"could not connect to {url}: refused")


def test_the_report_line_masks_a_query_string_password_too() -> None:
    assert redacted("postgresql://db/passk?password=hunter2") == (
        "postgresql://db/passk?password=***"
    )
    assert redacted("postgresql://u:hunter2@db:abc/p") == "(unparseable database URL)"


def test_the_env_file_is_0600_masked_and_names_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "env"
    path.write_text("old\n")
    path.chmod(0o644)  # an older `make up` left it readable by all
    write_env(
        path,
        {
            "PASSK_DATABASE_URL": "postgresql://db/passk?user=u&password=hunter2",
            "PASSK_OTHER_URL": "postgresql://:hunter2@db/passk",
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092",
            "KAFKA_SASL_PASSWORD": "hunter2",
            "PASSK_ALERT_WEBHOOK_TOKEN": "hunter2",
            "OPENAI_API_KEY": "hunter2",
            "OPENAI_BASE_URL": "http://127.0.0.1:8400/v1",
            "HOME": "/root",
        },
    )
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    body = path.read_text()
    assert SECRET not in body
    assert body.splitlines() == [
        "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092",
        "OPENAI_BASE_URL=http://127.0.0.1:8400/v1",
        "PASSK_ALERT_WEBHOOK_TOKEN=(set; not recorded)",
        "PASSK_DATABASE_URL=postgresql://db/passk?user=u&password=***",
        "PASSK_OTHER_URL=postgresql://:***@db/passk",
    ]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PASSK_DATABASE_URL", "postgresql://u:hunter2@db:abc/passk"),
        ("PASSK_DATABASE_URL", "notaurl"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:port/v1"),
        ("PASSK_PROMETHEUS_URL", "127.0.0.1:9090"),
        ("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:nine"),
    ],
)
def test_a_malformed_url_or_port_is_refused_naming_the_setting_not_the_secret(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as refused:
        Settings()
    message = str(refused.value)
    assert name in message and SECRET not in message.replace(repr(value), "")
    assert all(SECRET not in str(e["msg"]) for e in refused.value.errors())


def test_an_engine_for_a_non_numeric_port_is_a_usage_error() -> None:
    with pytest.raises(ArgumentError, match="port is not a number"):
        engine_for("postgresql://u:hunter2@db:abc/passk")


def test_store_errors_name_the_statement_never_its_parameters(tmp_path: Path) -> None:
    engine = engine_for(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id TEXT PRIMARY KEY, transcript TEXT)"))
        conn.execute(text("INSERT INTO t VALUES ('a', 'x')"))
    with pytest.raises(IntegrityError) as refused, engine.begin() as conn:
        conn.execute(
            text("INSERT INTO t VALUES (:id, :transcript)"),
            {"id": "a", "transcript": "my card is 4111 hunter2"},
        )
    assert "INSERT INTO t" in str(refused.value) and SECRET not in str(refused.value)
    assert isinstance(refused.value.orig, sqlite3.IntegrityError)


# --- item 7: the judge endpoint `make up` gave the workers, for the CLI


def test_the_cli_uses_the_stand_in_make_up_recorded(tmp_path: Path) -> None:
    import socket

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        settings = Settings(PASSK_DATA_DIR=str(tmp_path))  # type: ignore[call-arg]
        with pytest.raises(NoJudge, match="no judge model configured: export OPENAI_API_KEY"):
            cli_judge(settings)
        record_judge(judge_path(settings), f"http://127.0.0.1:{port}/v1", stand_in=True)
        used, note = cli_judge(settings)
        assert (used.openai_base_url, used.openai_api_key) == (
            f"http://127.0.0.1:{port}/v1",
            "stand-in",
        )
        assert note and "offline stand-in `make up` started" in note
        own = Settings(PASSK_DATA_DIR=str(tmp_path), OPENAI_API_KEY="sk-x")  # type: ignore[call-arg]
        assert cli_judge(own) == (own, None)  # the shell's own model wins
    with pytest.raises(NoJudge, match="does not answer") as gone:
        cli_judge(settings)
    assert gone.value.unreachable


def test_a_real_model_the_workers_use_is_named_with_what_to_export(tmp_path: Path) -> None:
    settings = Settings(PASSK_DATA_DIR=str(tmp_path))  # type: ignore[call-arg]
    record_judge(judge_path(settings), "https://llm.example/v1", stand_in=False)
    with pytest.raises(NoJudge, match="OPENAI_BASE_URL=https://llm.example/v1: export the same"):
        cli_judge(settings)
    assert "OPENAI_BASE_URL=http://127.0.0.1:8400/v1 OPENAI_API_KEY=stand-in" in NO_MODEL


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # red-team re-run: `;` separates query parameters too
        (
            "postgresql://db/passk?user=u;password=hunter2",
            "postgresql://db/passk?user=u;password=***",
        ),
        (
            "sqlite:////tmp/p.db?user=u;password=hunter2&x=1",
            "sqlite:////tmp/p.db?user=u;password=***&x=1",
        ),
    ],
)
def test_a_password_after_a_semicolon_is_masked(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert SECRET not in mask_text(f"error: unknown run ({url})")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("mysql://u:hunter2@127.0.0.1/db", "sqlite:// or postgresql://, not mysql://"),
        ("postgresql://u:hunter2@127.0.0.1:99999/db", "port 99999 is outside 1-65535"),
        ("postgresql://u:hunt@er2@dbhost/db", "unencoded '@'"),
    ],
)
def test_a_database_url_passk_cannot_use_is_refused_before_any_connection(
    value: str, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PASSK_DATABASE_URL", value)
    with pytest.raises(ValidationError) as refused:
        Settings()  # type: ignore[call-arg]
    messages = " ".join(str(e["msg"]) for e in refused.value.errors())
    assert problem in messages
    assert "hunt" not in messages and "er2@dbhost" not in messages
