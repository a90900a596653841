"""One function turns the settings into Kafka client arguments: nothing extra on
PLAINTEXT, TLS and SCRAM on SASL_SSL, a clear error when the settings cannot work."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from services.contract.settings import Settings
from services.kafka.kafka_client import KafkaConfigError, kafka_client_kwargs
from services.runtime.credentials import faust_broker_credentials
from services.storage.db import redacted

SECURE = {
    "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "KAFKA_SASL_USERNAME": "passk-gate",
    "KAFKA_SASL_PASSWORD": "s3cret-pw",
}


def settings(**env: str) -> Settings:
    return Settings(KAFKA_BOOTSTRAP_SERVERS="b1:9092,b2:9093", **env)  # type: ignore[arg-type]


def test_plaintext_adds_nothing_but_the_bootstrap() -> None:
    assert kafka_client_kwargs(settings()) == {"bootstrap_servers": "b1:9092,b2:9093"}
    assert faust_broker_credentials(settings()) is None


def test_sasl_ssl_carries_scram_and_a_verifying_tls_context() -> None:
    kw = kafka_client_kwargs(settings(**SECURE))
    assert kw["security_protocol"] == "SASL_SSL"
    assert kw["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (kw["sasl_plain_username"], kw["sasl_plain_password"]) == ("passk-gate", "s3cret-pw")
    assert isinstance(kw["ssl_context"], ssl.SSLContext)
    assert kw["ssl_context"].verify_mode is ssl.CERT_REQUIRED
    assert kw["ssl_context"].check_hostname


def test_faust_gets_the_same_credentials() -> None:
    creds = faust_broker_credentials(settings(**SECURE, KAFKA_SASL_MECHANISM="SCRAM-SHA-256"))
    assert creds.protocol.value == "SASL_SSL"
    assert creds.mechanism.value == "SCRAM-SHA-256"
    assert (creds.username, creds.password) == ("passk-gate", "s3cret-pw")
    assert "s3cret-pw" not in repr(creds)


def test_the_password_is_not_in_the_settings_repr() -> None:
    assert "s3cret-pw" not in repr(settings(**SECURE))


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"KAFKA_SECURITY_PROTOCOL": "SASL_TLS"}, "is not one of"),
        ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "u"}, "needs KAFKA_SASL"),
        ({**SECURE, "KAFKA_SSL_CAFILE": "/nonexistent/ca.pem"}, "is not a readable file"),
    ],
)
def test_settings_that_cannot_work_are_a_clear_error(env: dict[str, str], problem: str) -> None:
    with pytest.raises(KafkaConfigError, match=problem):
        kafka_client_kwargs(settings(**env))


def test_a_ca_file_is_loaded(tmp_path: Path) -> None:
    ca = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    if not ca.is_file():
        pytest.skip("no system CA bundle to load")
    kw = kafka_client_kwargs(settings(**SECURE, KAFKA_SSL_CAFILE=str(ca)))
    assert kw["ssl_context"].cert_store_stats()["x509_ca"] > 0


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://passk:hunter2@db:5432/passk", "postgresql://passk:***@db:5432/passk"),
        ("sqlite:///var/passk.db", "sqlite:///var/passk.db"),
        ("not a url", "(unparseable database URL)"),
    ],
)
def test_database_urls_are_printed_without_password(url: str, shown: str) -> None:
    assert redacted(url) == shown


def test_metrics_bind_loopback_unless_configured() -> None:
    assert settings().metrics_host == "127.0.0.1"
    assert settings(PASSK_METRICS_HOST="0.0.0.0").metrics_host == "0.0.0.0"


# --- retrying: what a call does while a lost broker is still in the cluster's metadata


class _Flaky:
    """Fails with `errors` in turn, then answers."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "answer"


def test_retrying_tries_again_after_retriable_errors() -> None:
    from kafka.errors import KafkaConnectionError, NotCoordinatorError

    from services.kafka.kafka_client import retrying

    call = _Flaky(KafkaConnectionError("111 ECONNREFUSED"), NotCoordinatorError())
    assert retrying(call, deadline_s=10) == "answer"
    assert call.calls == 3


@pytest.mark.parametrize("error", ["timeout", "not retriable"])
def test_retrying_gives_up_at_once_on_a_timeout_or_a_non_retriable_error(error: str) -> None:
    from kafka.errors import GroupAuthorizationFailedError, KafkaTimeoutError

    from services.kafka.kafka_client import retrying

    exc = (
        KafkaTimeoutError("Unable to bootstrap")
        if error == "timeout"
        else (GroupAuthorizationFailedError())
    )
    call = _Flaky(exc)
    with pytest.raises(type(exc)):
        retrying(call, deadline_s=10)
    assert call.calls == 1


def test_retrying_gives_up_after_its_deadline() -> None:
    from kafka.errors import KafkaConnectionError

    from services.kafka.kafka_client import retrying

    call = _Flaky(*[KafkaConnectionError("refused")] * 100)
    with pytest.raises(KafkaConnectionError):
        retrying(call, deadline_s=0.5)
    assert 2 <= call.calls < 100
