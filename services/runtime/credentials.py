"""Faust's broker credentials from the same settings the Kafka clients below use."""

from __future__ import annotations

from typing import Any

import faust
from faust.types.auth import SASLMechanism

from services.contract.settings import Settings
from services.kafka.kafka_client import kafka_client_kwargs


def faust_broker_credentials(settings: Settings) -> Any:
    """The same connection facts as Faust's `broker_credentials` (None for PLAINTEXT)."""
    kwargs = kafka_client_kwargs(settings)
    protocol = kwargs.get("security_protocol")
    if protocol is None:
        return None
    if protocol == "SSL":
        return faust.SSLCredentials(kwargs["ssl_context"])
    # With an ssl_context Faust speaks SASL_SSL, without one SASL_PLAINTEXT.
    return faust.SASLCredentials(
        username=kwargs["sasl_plain_username"],
        password=kwargs["sasl_plain_password"],
        mechanism=SASLMechanism(kwargs["sasl_mechanism"]),
        ssl_context=kwargs.get("ssl_context"),
    )
