"""Whether a processor's worker is running at all, as `passk status` shows it: what its
supervisor says (supervisord, as `make up` runs the workers) and whether its consumer
group has a member. A worker that is down is shown as down, not only as a restart count."""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
import xmlrpc.client
from collections.abc import Callable
from pathlib import Path
from typing import Any

# supervisord's states of a program that is not running, and will not be without help
# (FATAL, STOPPED), or is between failed starts (BACKOFF, EXITED).
NOT_RUNNING = frozenset({"FATAL", "EXITED", "BACKOFF", "STOPPED", "STOPPING", "UNKNOWN"})
RPC_TIMEOUT_S = 3.0


# A unix socket's path holds at most 107 bytes, and supervisord first binds
# "<file>.<its pid>", then renames it: a longer path refuses to start ("AF_UNIX path too
# long"), as a checkout in a deep directory would.
MAX_SOCKET_PATH = 96


def socket_in(run_dir: Path) -> Path:
    """Where supervisord listens for a run directory: run_dir/supervisor.sock, or, when that
    path is too long for a unix socket, a short one in the temporary directory named by
    the run directory's own path (so each checkout has its own)."""
    run_dir = run_dir.resolve()
    natural = run_dir / "supervisor.sock"
    if len(os.fsencode(natural)) <= MAX_SOCKET_PATH:
        return natural
    digest = hashlib.sha256(os.fsencode(run_dir)).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"passk-supervisor-{digest}.sock"


def supervisor_socket(data_dir: Path) -> Path:
    """Where `make up` has supervisord listen (`passk supervise config --out var/run/...`)."""
    return socket_in(data_dir / "run")


def supervisor_states(sock: Path) -> dict[str, str] | None:
    """program -> state from supervisord's XML-RPC interface on its unix socket; None when
    no supervisord answers there (the workers run some other way)."""
    if not sock.exists():
        return None
    from supervisor.xmlrpc import SupervisorTransport

    transport = SupervisorTransport(None, None, f"unix://{sock}")
    proxy = xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(RPC_TIMEOUT_S)  # a hung supervisord must not hang status
    try:
        infos: list[dict[str, Any]] = proxy.supervisor.getAllProcessInfo()  # type: ignore[assignment]
    except (OSError, xmlrpc.client.Error):
        return None
    finally:
        socket.setdefaulttimeout(previous)
        transport.close()
    return {str(i["name"]): str(i["statename"]) for i in infos}


# A worker that runs but has had no member in its group this long after its start is not
# joining any more: Faust's start-up and a rebalance take seconds to a minute here.
JOIN_GRACE_S = 120.0


def down_reason(
    *, supervisor_state: str | None, group_known: bool, members: int,
    up_s: float | None = None,
) -> str | None:
    """Why the processor is down, or None when nothing says so. `group_known`: the broker
    answered, so an empty group means no worker is consuming. `up_s`: how long ago its
    worker here started (its health file), None when unknown."""
    if supervisor_state in NOT_RUNNING:
        return f"supervisor says {supervisor_state}"
    if group_known and members == 0:
        if supervisor_state is None:
            return "no member in its consumer group"
        if up_s is not None and up_s > JOIN_GRACE_S and supervisor_state == "RUNNING":
            return (f"no member in its consumer group {up_s:.0f} s after its start "
                    "(its process runs: hung, or it cannot join)")
    # Running (or starting) under its supervisor but not in its group yet: joining, or
    # rebalancing; `status` shows it not ready, not down.
    return None


def stall_reason(health: dict[str, Any] | None, now: float, stall_after_s: float,
                 alive: Callable[[int], bool]) -> str | None:
    """Why a worker whose process is alive does nothing: its event loop has not written
    its heartbeat for `stall_after_s` (kill -STOP, a blocked loop). A dead process's file
    says nothing (its supervisor and its group tell); nor does one without a heartbeat."""
    if not health or not isinstance(health.get("beat_at"), int | float):
        return None
    silent = now - float(health["beat_at"])
    pid = health.get("pid")
    if silent <= stall_after_s or not isinstance(pid, int) or not alive(pid):
        return None
    return (f"no heartbeat for {silent:.0f} s from pid {pid}, which is alive "
            "(stopped or hung)")


def pid_alive(pid: int) -> bool:
    """Whether a process of that id exists on this host (a stopped one does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
