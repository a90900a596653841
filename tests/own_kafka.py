"""A Kafka of a test's own (a three-node cluster, or a SASL_SSL broker), started with the
same infra/kafka scripts an operator uses, on free ports and in the test's tmp dir, and
always stopped afterwards. Never the shared broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import ROOT, free_ports

KAFKA = ROOT / "infra" / "kafka"


@dataclass(frozen=True)
class OwnKafka:
    data_dir: Path
    brokers: int
    port: int
    controller_port: int
    security: str
    env: dict[str, str] = field(default_factory=dict, compare=False)  # for kafka-up.sh

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port + i}" for i in range(self.brokers))

    def node_dir(self, node: int) -> Path:
        return self.data_dir if self.brokers == 1 else self.data_dir / f"node{node}"

    def pid(self, node: int) -> int:
        return int((self.node_dir(node) / "kafka.pid").read_text())

    def kill(self, node: int) -> None:
        """SIGKILL one node, as a machine lost: no controlled shutdown, no restart."""
        pid = self.pid(node)
        os.kill(pid, signal.SIGKILL)
        from tests.support import wait_for

        def gone() -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            return False

        wait_for(gone, timeout=30, what=f"kafka node {node} gone")

    def up(self) -> None:
        """Start every node not running (after `kill`), on its data directory."""
        up = _script("kafka-up.sh", self.env, timeout=900)
        if up.returncode != 0:
            raise RuntimeError(f"kafka-up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")

    @property
    def secrets(self) -> Path:
        return self.data_dir / "secrets"

    def passwords(self) -> dict[str, str]:
        return json.loads((self.secrets / "users.json").read_text())  # type: ignore[no-any-return]

    def client_env(self, user: str) -> dict[str, str]:
        """The environment a client of `user` needs (SASL_SSL); empty for plaintext."""
        if self.security == "plaintext":
            return {}
        return {
            "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "KAFKA_SASL_USERNAME": user,
            "KAFKA_SASL_PASSWORD": self.passwords()[user],
            "KAFKA_SSL_CAFILE": str(self.secrets / "ca.pem"),
        }


def free_port_block(count: int) -> tuple[int, int]:
    """A base port with `count` free ports from it, and `count` more 100 up (controllers),
    in the test port range (`PASSK_TEST_PORTS`)."""
    base = free_ports(count, stride=100, groups=2)
    return base, base + 100


def _script(name: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(KAFKA / name)],
        env=env,
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=timeout,
    )


@contextmanager
def own_kafka(
    data_dir: Path,
    *,
    brokers: int = 1,
    security: str = "plaintext",
    topic_prefix: str = "passk.",
    heap: str = "512m",
    authorizer_log: str = "INFO",
) -> Iterator[OwnKafka]:
    port, cport = free_port_block(brokers)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
    kafka = OwnKafka(data_dir, brokers, port, cport, security, env)
    env.update(
        PASSK_KAFKA_DIR=str(data_dir),
        PASSK_KAFKA_BROKERS=str(brokers),
        PASSK_KAFKA_PORT=str(port),
        PASSK_KAFKA_CONTROLLER_PORT=str(cport),
        PASSK_KAFKA_SECURITY=security,
        PASSK_KAFKA_HEAP=heap,
        PASSK_TOPIC_PREFIX=topic_prefix,
        PASSK_KAFKA_READY_S="600",
        PASSK_KAFKA_AUTHORIZER_LOG=authorizer_log,
    )
    try:
        kafka.up()
        yield kafka
    finally:
        _script("kafka-down.sh", env, timeout=180)
