"""Before a command's first Kafka client: the broker listens, and, when we sign in with
SASL, it takes our credentials. Both answers come within the command's `--wait`, not
after kafka-python's 30 s bootstrap timeout: a broker that is down is exit 4, and a
wrong password exit 5 as soon as the broker has said so (kafka-python records such a
refusal and retries it until its timeout, as if the broker were slow)."""

from __future__ import annotations

import logging
import socket
import time

from services.contract.exits import KafkaRefused, Unreachable, UsageError
from services.contract.settings import Settings
from services.kafka.kafka_client import (
    authentication_failed,
    is_authentication_error,
    kafka_client_kwargs,
    watch_authentication,
)

# A wrong password is told within the first SASL exchange; on a loaded two-core machine
# the TLS and SASL handshakes alone took up to about a second, so never less than this.
CREDENTIALS_MIN_S = 3.0


def require_broker(wait_s: float | None, settings: Settings) -> None:
    """Return once a bootstrap broker accepts a connection and, with SASL, our
    credentials; raise Unreachable after `wait_s` seconds (None: PASSK_BROKER_WAIT_S; at
    least one attempt is made, each bounded to 2 s), KafkaRefused when the broker turned
    the credentials down."""
    wait_s = settings.broker_wait_s if wait_s is None else wait_s
    _listens(wait_s, settings)
    refuse_wrong_credentials(settings, within_s=max(wait_s, CREDENTIALS_MIN_S))


def refuse_wrong_credentials(settings: Settings, within_s: float) -> None:
    """With SASL, one bootstrap of at most `within_s` seconds; raise KafkaRefused when the
    broker refused the credentials. Anything else (no answer in time, a broker going
    down) is left to the command's own client, which waits and says what it is."""
    if not settings.kafka_security_protocol.upper().startswith("SASL"):
        return
    from kafka import KafkaAdminClient  # kafka-python costs a CLI start-up time otherwise

    kwargs = kafka_client_kwargs(settings)  # a malformed setting raises here, exit 2
    watch = watch_authentication()
    try:
        client = KafkaAdminClient(**kwargs, bootstrap_timeout_ms=int(within_s * 1000))
    except Exception as exc:
        if is_authentication_error(exc) or watch.failed is not None:
            raise KafkaRefused(authentication_failed(settings)) from None
        return
    finally:
        logging.getLogger("kafka").removeHandler(watch)
    client.close()


def _brokers(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for part in bootstrap.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise UsageError(
                f"KAFKA_BOOTSTRAP_SERVERS={bootstrap!r}: expected host:port[,host:port...]"
            )
        out.append((host.strip("[]"), int(port)))
    return out


def _listens(wait_s: float, settings: Settings) -> None:
    brokers = _brokers(settings.kafka_bootstrap_servers)
    deadline = time.monotonic() + wait_s
    last: OSError | None = None
    while True:
        for host, port in brokers:
            remaining = max(deadline - time.monotonic(), 0.2)
            try:
                socket.create_connection((host, port), timeout=min(remaining, 2.0)).close()
                return
            except OSError as exc:
                last = exc
        if time.monotonic() >= deadline:
            break
        time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))
    raise Unreachable(
        f"no Kafka broker answers at {settings.kafka_bootstrap_servers} "
        f"(waited {wait_s:g} s; {last}). Start it with `make kafka-up` or set "
        "KAFKA_BOOTSTRAP_SERVERS."
    )
