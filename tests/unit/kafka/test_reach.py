"""Before a command's first Kafka client (services/kafka/reach.py): what it answers with no
broker, with a SASL broker that does not answer, and with no SASL to check. The refusal
of a real wrong password is shown against a real SASL_SSL broker
(tests/e2e/test_secured.py)."""

from __future__ import annotations

import time
from typing import Any

import kafka
import pytest

from services.contract.exits import ExitCode, KafkaRefused, Unreachable
from services.contract.settings import Settings
from services.kafka import reach
from tests.support import free_ports


def settings(**env: Any) -> Settings:
    return Settings(**{"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_ports(1)}", **env})


def test_nothing_listening_is_unreachable_within_the_wait() -> None:
    started = time.monotonic()
    with pytest.raises(Unreachable, match="no Kafka broker answers at 127.0.0.1:"):
        reach.require_broker(0.5, settings())
    assert time.monotonic() - started < 10  # the library's own bootstrap timeout is 30 s


def test_without_sasl_no_client_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    def made(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a credentials check without SASL")

    monkeypatch.setattr(kafka, "KafkaAdminClient", made)
    reach.refuse_wrong_credentials(settings(), within_s=1.0)  # returns, makes nothing


def test_a_sasl_broker_that_does_not_answer_is_not_called_a_refusal() -> None:
    # Nothing refused the credentials: the command's own client says what it is (exit 4).
    sasl = settings(
        KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", KAFKA_SASL_USERNAME="u", KAFKA_SASL_PASSWORD="p"
    )
    started = time.monotonic()
    reach.refuse_wrong_credentials(sasl, within_s=1.0)
    assert time.monotonic() - started < 10


def test_a_refusal_exits_5_and_names_the_user_not_the_password() -> None:
    sasl = settings(
        KAFKA_SECURITY_PROTOCOL="SASL_SSL",
        KAFKA_SASL_USERNAME="passk-cli",
        KAFKA_SASL_PASSWORD="hunter2",
    )
    refused = KafkaRefused(reach.authentication_failed(sasl))
    assert refused.code == ExitCode.KAFKA_REFUSED == 5
    assert "authentication failed for user 'passk-cli'" in refused.message
    assert "hunter2" not in refused.message
