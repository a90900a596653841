"""Settings come from the environment variables DESIGN.md names, with its defaults."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.contract.settings import PROJECT_ROOT, Settings, get_settings

VARIABLES = (
    "KAFKA_BOOTSTRAP_SERVERS",
    "PASSK_TOPIC_PREFIX",
    "PASSK_TOPIC_PARTITIONS",
    "PASSK_TOPIC_RETENTION_MS",
    "PASSK_DATABASE_URL",
    "PASSK_SESSION_WAIT_S",
    "PASSK_JUDGE_WAIT_S",
    "PASSK_MAX_EVENT_BYTES",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "PASSK_JUDGE_MODEL",
    "PASSK_METRICS_PORT",
    "PASSK_DATA_DIR",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in VARIABLES:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_defaults(clean_env: pytest.MonkeyPatch) -> None:
    s = Settings()  # type: ignore[call-arg]
    assert s.kafka_bootstrap_servers == "127.0.0.1:9092"
    assert s.topic_prefix == "passk."
    assert s.topic_partitions == 8
    assert s.topic_retention_ms == -1
    assert s.database_url == f"sqlite:///{PROJECT_ROOT / 'var' / 'passk.db'}"
    assert s.session_wait_s == 120
    assert s.openai_api_key is None
    assert s.openai_base_url is None
    assert s.judge_model  # a model name is always set; the key decides whether it is used
    assert s.max_event_bytes == 1_000_000
    assert s.data_dir == PROJECT_ROOT / "var"


READ: list[tuple[str, str, str, object]] = [
    ("KAFKA_BOOTSTRAP_SERVERS", "kafka:9092", "kafka_bootstrap_servers", "kafka:9092"),
    ("PASSK_TOPIC_PREFIX", "ci.", "topic_prefix", "ci."),
    ("PASSK_TOPIC_PARTITIONS", "3", "topic_partitions", 3),
    ("PASSK_TOPIC_RETENTION_MS", "86400000", "topic_retention_ms", 86_400_000),
    ("PASSK_DATABASE_URL", "postgresql://u@db/passk", "database_url", "postgresql://u@db/passk"),
    ("PASSK_SESSION_WAIT_S", "2.5", "session_wait_s", 2.5),
    ("OPENAI_API_KEY", "sk-test", "openai_api_key", "sk-test"),
    ("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1", "openai_base_url", "http://127.0.0.1:8000/v1"),
    ("PASSK_JUDGE_MODEL", "gpt-4.1-mini", "judge_model", "gpt-4.1-mini"),
    ("PASSK_MAX_EVENT_BYTES", "2048", "max_event_bytes", 2048),
    ("PASSK_METRICS_PORT", "9464", "metrics_port", 9464),
]


@pytest.mark.parametrize(("var", "value", "attr", "expected"), READ, ids=[r[0] for r in READ])
def test_each_variable_is_read(
    clean_env: pytest.MonkeyPatch, var: str, value: str, attr: str, expected: object
) -> None:
    clean_env.setenv(var, value)
    assert getattr(Settings(), attr) == expected  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("PASSK_SESSION_WAIT_S", "0"),
        ("PASSK_SESSION_WAIT_S", "soon"),
        ("PASSK_TOPIC_PARTITIONS", "0"),
        ("PASSK_MAX_EVENT_BYTES", "-1"),
        ("PASSK_METRICS_PORT", "-5"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(
    clean_env: pytest.MonkeyPatch, var: str, value: str
) -> None:
    clean_env.setenv(var, value)
    with pytest.raises(ValidationError) as info:
        Settings()  # type: ignore[call-arg]
    assert info.value.errors()[0]["loc"] == (var,)


def test_settings_can_be_built_in_code_by_variable_or_field_name(
    clean_env: pytest.MonkeyPatch,
) -> None:
    by_alias = Settings(PASSK_TOPIC_PREFIX="a.")  # type: ignore[call-arg]
    by_name = Settings(topic_prefix="b.")  # type: ignore[call-arg]
    assert (by_alias.topic_prefix, by_name.topic_prefix) == ("a.", "b.")


def test_get_settings_reads_the_environment_once(clean_env: pytest.MonkeyPatch) -> None:
    get_settings.cache_clear()
    try:
        clean_env.setenv("PASSK_TOPIC_PREFIX", "once.")
        first = get_settings()
        clean_env.setenv("PASSK_TOPIC_PREFIX", "twice.")
        assert get_settings() is first
        assert first.topic_prefix == "once."
    finally:
        get_settings.cache_clear()
