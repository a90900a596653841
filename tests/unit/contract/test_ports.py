"""One offset moves every port of a stack; a port's own variable wins over it."""

from __future__ import annotations

import pytest

from services.contract.ports import DEFAULT_PORTS, exports, ports
from services.contract.settings import Settings
from services.otlp.settings import OtlpSettings


def test_the_offset_moves_every_port() -> None:
    moved = ports({"PASSK_PORT_OFFSET": "100"})
    assert moved == {name: port + 100 for name, port in DEFAULT_PORTS.items()}
    assert len(set(moved.values())) == len(moved)  # no two servers share a port


def test_a_port_of_its_own_wins_over_the_offset() -> None:
    found = exports(
        {
            "PASSK_PORT_OFFSET": "100",
            "PASSK_REVIEW_PORT": "0",
            "KAFKA_BOOTSTRAP_SERVERS": "10.0.0.5:9092",
        }
    )
    assert found["PASSK_REVIEW_PORT"] == "0"  # not started
    assert found["PASSK_AGENT_PORT"] == "8700"
    assert "KAFKA_BOOTSTRAP_SERVERS" not in found  # given: left alone
    assert found["PASSK_KAFKA_PORT"] == "9192"  # a remote broker: make kafka-up's own
    shared = exports({"PASSK_PORT_OFFSET": "100", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092"})
    assert shared["PASSK_KAFKA_PORT"] == "9092"  # a local one given: the one reused
    assert found["PASSK_PROMETHEUS_URL"] == "http://127.0.0.1:9190"


@pytest.mark.parametrize("bad", ["-1", "x", "60000"])
def test_a_bad_offset_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="PASSK_PORT_OFFSET"):
        ports({"PASSK_PORT_OFFSET": bad})


def test_the_settings_default_to_the_same_ports() -> None:
    """The CLI and the workers, given only the offset, talk to the ports make up used."""
    s = Settings(PASSK_PORT_OFFSET=100)  # type: ignore[call-arg]
    shell = exports({"PASSK_PORT_OFFSET": "100"})
    assert s.kafka_bootstrap_servers == shell["KAFKA_BOOTSTRAP_SERVERS"]
    assert s.prometheus_url == shell["PASSK_PROMETHEUS_URL"]
    assert s.alertmanager_url == shell["PASSK_ALERTMANAGER_URL"]
    assert s.metrics_port_base == int(shell["PASSK_METRICS_PORT_BASE"])
    assert s.review_port == int(shell["PASSK_REVIEW_PORT"])
    assert OtlpSettings(PASSK_PORT_OFFSET=100).port == int(shell["PASSK_OTLP_PORT"])  # type: ignore[call-arg]
    explicit = Settings(PASSK_PORT_OFFSET=100, KAFKA_BOOTSTRAP_SERVERS="h:1")  # type: ignore[call-arg]
    assert explicit.kafka_bootstrap_servers == "h:1"
    assert Settings().kafka_bootstrap_servers == "127.0.0.1:9092"  # type: ignore[call-arg]


def test_the_settings_file_make_up_writes_reaches_the_stack_and_holds_no_secret(
    tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from services.contract import settings as settings_module
    from services.contract.runfiles import write_settings

    path = tmp_path / "passk.env"
    write_settings(
        path,
        {
            "PASSK_PORT_OFFSET": "100",
            "PASSK_TOPIC_PREFIX": "stack2.",
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9192",
            "PASSK_DATABASE_URL": "postgresql://u:hunter2@db/passk",  # a password: left out
            "KAFKA_SASL_PASSWORD": "s3cret",
            "PASSK_REVIEW_TOKENS": "ann:tok",
            "OPENAI_API_KEY": "sk-x",
            "HOME": "/root",
        },
    )
    body = path.read_text()
    assert "hunter2" not in body and "s3cret" not in body and "tok" not in body
    assert "sk-x" not in body and "HOME" not in body
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    for name in list(__import__("os").environ):
        if name.startswith(("PASSK_", "KAFKA_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PASSK_ENV_FILE", str(path))
    settings_module.get_settings.cache_clear()
    try:
        s = settings_module.get_settings()
        assert (s.topic_prefix, s.kafka_bootstrap_servers, s.review_port) == (
            "stack2.",
            "127.0.0.1:9192",
            8800,
        )
        monkeypatch.setenv("PASSK_TOPIC_PREFIX", "mine.")  # the environment wins
        settings_module.get_settings.cache_clear()
        assert settings_module.get_settings().topic_prefix == "mine."
    finally:
        settings_module.get_settings.cache_clear()


def test_no_settings_file_when_told_none(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from services.contract.settings import settings_files

    (tmp_path / "passk.env").write_text("PASSK_TOPIC_PREFIX=here.\n")
    monkeypatch.chdir(tmp_path)
    assert settings_files({"PASSK_ENV_FILE": ""}) == ()
    assert tmp_path / "passk.env" in settings_files({})
