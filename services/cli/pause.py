"""Holding a processor's workers stopped while a command rewrites what they own (the
aggregate's table, for `passk aggregate recount`). Under `make up`'s supervisord the
command stops the program and starts it again afterwards, also when the command fails;
otherwise the operator stops the workers, and the command checks that their consumer
group has no member left."""

from __future__ import annotations

import socket
import time
import xmlrpc.client
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kafka import KafkaAdminClient

from services.cli.liveness import RPC_TIMEOUT_S, supervisor_socket
from services.contract.exits import UsageError
from services.contract.settings import Settings
from services.kafka.kafka_client import kafka_client_kwargs

LEAVE_WAIT_S = 45.0  # a worker stopped by SIGTERM leaves at once; one killed, a session later
RUNNING = ("RUNNING", "STARTING", "BACKOFF")


def group_members(group: str, settings: Settings) -> int:
    admin = KafkaAdminClient(**kafka_client_kwargs(settings))
    try:
        described = admin.describe_groups([group])
    finally:
        admin.close()
    info = described.get(group) if isinstance(described, dict) else None
    return len((info or {}).get("members") or [])


def _supervisor(settings: Settings) -> Any | None:
    sock = supervisor_socket(settings.data_dir)
    if not sock.exists():
        return None
    from supervisor.xmlrpc import SupervisorTransport

    transport = SupervisorTransport(None, None, f"unix://{sock}")
    return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)


def _state(proxy: Any, service: str) -> str | None:
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(RPC_TIMEOUT_S)
    try:
        return str(proxy.supervisor.getProcessInfo(service)["statename"])
    except (OSError, xmlrpc.client.Error):
        return None
    finally:
        socket.setdefaulttimeout(previous)


@contextmanager
def worker_paused(service: str, settings: Settings) -> Iterator[None]:
    """No worker of `service` runs inside the block (UsageError when that cannot be had)."""
    group = f"{settings.topic_prefix}{service}"
    proxy = _supervisor(settings)
    supervised = proxy is not None and _state(proxy, service) in RUNNING
    if supervised:
        assert proxy is not None
        proxy.supervisor.stopProcess(service, True)
    try:
        # a worker SIGKILLed a moment ago stays a member until its session times out
        deadline = time.monotonic() + LEAVE_WAIT_S
        while (members := group_members(group, settings)) and time.monotonic() < deadline:
            time.sleep(1.0)
        if members:
            raise UsageError(
                f"the {service} processor's group {group} has {members} member(s): stop its "
                f"workers first (`make down`, or stop `passk worker {service}`), then run "
                "this again")
        yield
    finally:
        if supervised:
            assert proxy is not None
            proxy.supervisor.startProcess(service, True)
