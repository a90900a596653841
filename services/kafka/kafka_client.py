"""How every Kafka client of passk connects: one place that turns the settings into
connection arguments, so a secured broker (SASL_SSL + SCRAM) needs no change elsewhere.

kafka-python (CLI, producer SDK, admin calls) and aiokafka (the scenario catalog) accept
the same argument names; Faust takes the same facts as `broker_credentials`."""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from typing import Any, TypeVar

from services.contract.settings import Settings
from services.kafka import kafka_python_compat

log = logging.getLogger(__name__)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


T = TypeVar("T")

# A broker just lost stays in the cluster's metadata until the controller fences it
# (broker.session.timeout.ms, 9 s by default), and kafka-python's admin client sends each
# request to a node drawn at random from that metadata, without trying another: in those
# seconds one call in three failed with KafkaConnectionError while two brokers answered
# (a worker started then exited 4, "broker unreachable"; `passk status` said the same).
# Such errors are retriable; a group coordinator or a partition leader moving is too.
CLUSTER_SETTLE_S = 30.0


def retrying(call: Callable[[], T], *, deadline_s: float = CLUSTER_SETTLE_S) -> T:
    """call(), again while it fails with an error Kafka marks retriable, for `deadline_s`.

    `call` should open its own clients, so that each try starts from fresh metadata. A
    KafkaTimeoutError is not retried: no broker answered within the client's own timeout
    (or it refused our credentials), and trying again would only multiply the wait."""
    from kafka.errors import KafkaError, KafkaTimeoutError

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return call()
        except KafkaTimeoutError:
            raise
        except KafkaError as exc:
            if not getattr(exc, "retriable", False) or time.monotonic() >= deadline:
                raise
            log.info("retrying after a retriable Kafka error: %s", exc)
        time.sleep(0.2)


class KafkaConfigError(ValueError):
    """The security settings cannot work together (reported before any connection)."""


def _ssl_context(settings: Settings) -> ssl.SSLContext:
    cafile = settings.kafka_ssl_cafile
    if cafile is not None and not cafile.is_file():
        raise KafkaConfigError(f"KAFKA_SSL_CAFILE {cafile} is not a readable file")
    # Verifies the broker's certificate and host name against the CA (or the system's).
    return ssl.create_default_context(cafile=str(cafile) if cafile else None)


def kafka_client_kwargs(settings: Settings) -> dict[str, Any]:
    """bootstrap_servers plus whatever the security protocol needs, for kafka-python and
    aiokafka alike. Plain PLAINTEXT adds nothing, so the default clients are unchanged.
    Every kafka-python client is made with these, so this is where its one fix goes in."""
    kafka_python_compat.install()
    protocol = settings.kafka_security_protocol.upper()
    if protocol not in PROTOCOLS:
        raise KafkaConfigError(
            f"KAFKA_SECURITY_PROTOCOL {settings.kafka_security_protocol!r} is not one of "
            f"{', '.join(PROTOCOLS)}"
        )
    kwargs: dict[str, Any] = {"bootstrap_servers": settings.kafka_bootstrap_servers}
    if protocol == "PLAINTEXT":
        return kwargs
    kwargs["security_protocol"] = protocol
    if "SSL" in protocol:
        kwargs["ssl_context"] = _ssl_context(settings)
    if protocol.startswith("SASL"):
        if not settings.kafka_sasl_username or settings.kafka_sasl_password is None:
            raise KafkaConfigError(
                f"KAFKA_SECURITY_PROTOCOL={protocol} needs KAFKA_SASL_USERNAME and "
                "KAFKA_SASL_PASSWORD"
            )
        kwargs["sasl_mechanism"] = settings.kafka_sasl_mechanism
        kwargs["sasl_plain_username"] = settings.kafka_sasl_username
        kwargs["sasl_plain_password"] = settings.kafka_sasl_password.get_secret_value()
    return kwargs


# `passk` exits with this when Kafka refuses who we are or what we ask (4 is "broker or
# store unreachable"): a wrong password must not look like a broker that is down.
EXIT_KAFKA_REFUSED = 5  # == services.contract.exits.ExitCode.KAFKA_REFUSED


class AuthFailureWatch(logging.Handler):
    """Notices SASL authentication failures that kafka-python logs and retries (it then
    gives up with a bare "Unable to bootstrap"), so the CLI can say what really happened."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.failed: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        for arg in record.args if isinstance(record.args, tuple) else ():
            if isinstance(arg, Exception) and is_authentication_error(arg):
                self.failed = arg


def watch_authentication() -> AuthFailureWatch:
    watch = AuthFailureWatch()
    logging.getLogger("kafka").addHandler(watch)
    return watch


def is_authentication_error(exc: BaseException) -> bool:
    from kafka.errors import SaslAuthenticationFailedError

    return isinstance(exc, SaslAuthenticationFailedError) or "Authentication failed" in str(exc)


def refusal_message(
    exc: BaseException, watch: AuthFailureWatch, read_settings: Callable[[], Settings]
) -> str | None:
    """A one-line explanation when Kafka refused our credentials or rights, else None."""
    from kafka.errors import AuthorizationError

    refused = is_authentication_error(exc) or watch.failed is not None
    if not refused and not isinstance(exc, AuthorizationError):
        return None  # read no settings: a malformed one is what the caller reports next
    settings = read_settings()
    if refused:
        return authentication_failed(settings)
    if isinstance(exc, AuthorizationError):
        return (
            f"Kafka refused user {settings.kafka_sasl_username or '(none)'!r} an "
            f"operation its ACLs do not allow: {type(exc).__name__}: {exc}"
        )
    return None


def authentication_failed(settings: Settings) -> str:
    """What to tell a user whose SASL credentials the broker refused (never the password)."""
    return (
        f"Kafka authentication failed for user {settings.kafka_sasl_username or '(none)'!r} "
        f"({settings.kafka_security_protocol} {settings.kafka_sasl_mechanism} at "
        f"{settings.kafka_bootstrap_servers}); check KAFKA_SASL_USERNAME and "
        "KAFKA_SASL_PASSWORD"
    )
