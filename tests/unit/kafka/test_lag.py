"""The lag monitor's clients connect the way the worker does: on a secured broker a client
without the worker's credentials is refused, and the lag gauges stayed empty."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.contract.settings import Settings
from services.kafka import lag
from services.kafka.lag import LagMetrics, LagMonitor


class Refused(Exception):
    pass


def test_the_lag_clients_carry_the_workers_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    class Admin:
        def __init__(self, **kwargs: Any) -> None:
            seen.append(("admin", kwargs))

        def close(self) -> None:
            pass

    def consumer(**kwargs: Any) -> None:
        seen.append(("consumer", kwargs))
        raise Refused("stop here: the clients are built")

    monkeypatch.setattr(lag, "KafkaAdminClient", Admin)
    monkeypatch.setattr(lag, "KafkaConsumer", consumer)
    settings = Settings(  # type: ignore[call-arg]
        KAFKA_BOOTSTRAP_SERVERS="b1:9092",
        KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT",
        KAFKA_SASL_USERNAME="passk-gate",
        KAFKA_SASL_PASSWORD="s3cret-pw",
    )
    LagMonitor("gate", settings, LagMetrics(CollectorRegistry())).poll()  # logs, never raises

    assert [name for name, _ in seen] == ["admin", "consumer"]
    for _, kwargs in seen:
        assert kwargs["bootstrap_servers"] == "b1:9092"
        assert kwargs["security_protocol"] == "SASL_PLAINTEXT"
        assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == (
            "passk-gate",
            "s3cret-pw",
        )
