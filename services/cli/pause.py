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
from services.contract.exits import CliError, ExitCode, UsageError
from services.contract.settings import Settings
from services.kafka.kafka_client import kafka_client_kwargs

LEAVE_WAIT_S = 45.0  # a worker stopped by SIGTERM leaves at once; one killed, a session later
RUNNING = ("RUNNING", "STARTING", "BACKOFF")
STOP_WAIT_S = 90.0  # supervisord's own stop wait, and more


def group_members(group: str, settings: Settings) -> int:
    admin = KafkaAdminClient(**kafka_client_kwargs(settings))
    try:
        described = admin.describe_groups([group])
    finally:
        admin.close()
    info = described.get(group) if isinstance(described, dict) else None
    return len((info or {}).get("members") or [])


def _supervisor(settings: Settings) -> Any | None:
    """A fresh XML-RPC proxy to `make up`'s supervisord (each call its own: the transport
    keeps its connection, with the timeout it was opened under)."""
    sock = supervisor_socket(settings.data_dir)
    if not sock.exists():
        return None
    from supervisor.xmlrpc import SupervisorTransport

    transport = SupervisorTransport(None, None, f"unix://{sock}")
    return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)


def _call(settings: Settings, timeout_s: float, method: str, *args: Any) -> Any:
    """One call to supervisord, bounded; CliError (not a traceback) when it fails."""
    proxy = _supervisor(settings)
    if proxy is None:
        raise CliError("make up's supervisord went away", ExitCode.UNREACHABLE)
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout_s)
    try:
        return getattr(proxy.supervisor, method)(*args)
    except (OSError, xmlrpc.client.Error) as exc:
        raise CliError(f"supervisord: {method}{args}: {exc}", ExitCode.UNREACHABLE) from None
    finally:
        socket.setdefaulttimeout(previous)


def _state(settings: Settings, service: str) -> str | None:
    try:
        return str(_call(settings, RPC_TIMEOUT_S, "getProcessInfo", service)["statename"])
    except CliError:
        return None


@contextmanager
def worker_paused(service: str, settings: Settings) -> Iterator[None]:
    """No worker of `service` runs inside the block (UsageError when that cannot be had)."""
    group = f"{settings.topic_prefix}{service}"
    supervised = _supervisor(settings) is not None and _state(settings, service) in RUNNING
    if supervised:
        # waits for the worker to exit (supervisord's stopwaitsecs bounds it)
        _call(settings, STOP_WAIT_S, "stopProcess", service, True)
    try:
        # a worker SIGKILLed a moment ago stays a member until its session times out
        deadline = time.monotonic() + LEAVE_WAIT_S
        while (members := group_members(group, settings)) and time.monotonic() < deadline:
            time.sleep(1.0)
        if members:
            raise UsageError(
                f"the {service} processor's group {group} has {members} member(s): stop its "
                f"workers first (`make down`, or stop `passk worker {service}`), then run "
                "this again"
            )
        yield
    finally:
        if supervised:
            _call(settings, STOP_WAIT_S, "startProcess", service, False)
