"""Whether a processor's worker is running at all, as `passk status` shows it: what its
supervisor says (supervisord, as `make up` runs the workers) and whether its consumer
group has a member. A worker that is down is shown as down, not only as a restart count."""

from __future__ import annotations

import socket
import xmlrpc.client
from pathlib import Path
from typing import Any

# supervisord's states of a program that is not running, and will not be without help
# (FATAL, STOPPED), or is between failed starts (BACKOFF, EXITED).
NOT_RUNNING = frozenset({"FATAL", "EXITED", "BACKOFF", "STOPPED", "STOPPING", "UNKNOWN"})
RPC_TIMEOUT_S = 3.0


def supervisor_socket(data_dir: Path) -> Path:
    """Where `make up` has supervisord listen (`passk supervise config --out var/run/...`)."""
    return data_dir / "run" / "supervisor.sock"


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


def down_reason(
    *, supervisor_state: str | None, group_known: bool, members: int
) -> str | None:
    """Why the processor is down, or None when nothing says so. `group_known`: the broker
    answered, so an empty group means no worker is consuming."""
    if supervisor_state in NOT_RUNNING:
        return f"supervisor says {supervisor_state}"
    if group_known and members == 0 and supervisor_state is None:
        return "no member in its consumer group"
    # Running (or starting) under its supervisor but not in its group: joining, or
    # rebalancing; `status` shows it not ready, not down.
    return None
