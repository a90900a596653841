"""Who a client is on a secured broker: one SCRAM user per processor, and the connection
settings a user's client needs, read from the secrets directory that
`infra/kafka/secure.py init` makes (`users.json` with the passwords, `ca.pem`).

Both secure.py (which creates the users and their ACLs) and `passk supervise config`
(which runs each supervised worker as its own user) take the names from here."""

from __future__ import annotations

import json
from pathlib import Path

MECHANISM = "SCRAM-SHA-512"


class UnknownKafkaUser(LookupError):
    """The secrets directory has no password for this user (made before it existed?)."""


def processor_user(processor: str) -> str:
    return f"passk-{processor}"


def passwords(secrets_dir: Path) -> dict[str, str]:
    return json.loads((secrets_dir / "users.json").read_text())


def client_env(secrets_dir: Path, user: str) -> dict[str, str]:
    """The KAFKA_* environment that makes a passk client connect as `user` (SASL_SSL)."""
    known = passwords(secrets_dir)
    if user not in known:
        raise UnknownKafkaUser(
            f"no Kafka user {user!r} in {secrets_dir / 'users.json'} (made by "
            "infra/kafka/secure.py init for a secured kafka-up)"
        )
    return {
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": MECHANISM,
        "KAFKA_SASL_USERNAME": user,
        "KAFKA_SASL_PASSWORD": known[user],
        "KAFKA_SSL_CAFILE": str(secrets_dir / "ca.pem"),
    }
