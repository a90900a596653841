"""Every port a local stack listens on, in one place, and one offset that moves them all.

`PASSK_PORT_OFFSET=N` adds N to each default below, so a second stack on the same machine
(another clone, a CI job beside a developer's) takes its own ports with one setting. A
port set by its own variable wins over the offset. The shell scripts (`make up`, `make
kafka-up`, `make demo`) take their ports from `python -m services.contract.ports`, which
prints them as `export` lines; the settings (services/contract/settings.py) apply the same
offset to the URLs and ports they default, so the CLI and the workers agree with them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

# variable -> its port with no offset
DEFAULT_PORTS: dict[str, int] = {
    "PASSK_KAFKA_PORT": 9092,  # the broker (its controller listens on the next port)
    "PASSK_STANDIN_PORT": 8400,  # the offline judge stand-in
    "PASSK_METRICS_PORT_BASE": 9464,  # each worker's /metrics: base + its registry offset
    "PASSK_PROMETHEUS_PORT": 9090,
    "PASSK_ALERTMANAGER_PORT": 9095,
    "PASSK_OTLP_PORT": 4318,  # the OTLP/HTTP receiver
    "PASSK_AGENT_PORT": 8600,  # the reference product (examples/agent)
    "PASSK_REVIEW_PORT": 8700,  # the review app
    "PASSK_DEMO_WEBHOOK_PORT": 9097,  # the demo's loopback Alertmanager webhook receiver
}
MAX_OFFSET = 50_000


def offset(environ: Mapping[str, str]) -> int:
    raw = environ.get("PASSK_PORT_OFFSET", "").strip() or "0"
    if not raw.isdigit() or int(raw) > MAX_OFFSET:
        raise ValueError(f"PASSK_PORT_OFFSET must be a whole number 0-{MAX_OFFSET}, not {raw!r}")
    return int(raw)


def default_port(name: str, environ: Mapping[str, str]) -> int:
    """`name`'s port with the offset applied (what it is when its own variable is unset)."""
    return DEFAULT_PORTS[name] + offset(environ)


def ports(environ: Mapping[str, str]) -> dict[str, int]:
    """Every port: its own variable's value if set, else the default moved by the offset.
    (Port 0 means "not started" for the optional servers, and is kept as given.)"""
    out = {}
    for name in DEFAULT_PORTS:
        given = environ.get(name, "").strip()
        out[name] = int(given) if given.isdigit() else default_port(name, environ)
    return out


def exports(environ: Mapping[str, str]) -> dict[str, str]:
    """What `make up` exports: every port, and the URLs that name them unless given."""
    found = ports(environ)
    bootstrap = environ.get("KAFKA_BOOTSTRAP_SERVERS", "").split(",")[0].strip()
    host, _, given = bootstrap.rpartition(":")
    if (
        bootstrap
        and not environ.get("PASSK_KAFKA_PORT", "").strip()
        and given.isdigit()
        and host in ("127.0.0.1", "localhost")
    ):
        # the broker the stack is told to use is the one `make kafka-up` reuses or starts
        found["PASSK_KAFKA_PORT"] = int(given)
    out = {name: str(port) for name, port in found.items()}
    if not environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        out["KAFKA_BOOTSTRAP_SERVERS"] = f"127.0.0.1:{found['PASSK_KAFKA_PORT']}"
    if not environ.get("PASSK_PROMETHEUS_URL"):
        out["PASSK_PROMETHEUS_URL"] = f"http://127.0.0.1:{found['PASSK_PROMETHEUS_PORT']}"
    if not environ.get("PASSK_ALERTMANAGER_URL"):
        out["PASSK_ALERTMANAGER_URL"] = f"http://127.0.0.1:{found['PASSK_ALERTMANAGER_PORT']}"
    return out


def main() -> None:
    try:
        found = exports(os.environ)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    for name, value in found.items():
        print(f"export {name}={value}")


if __name__ == "__main__":
    main()
