"""Whether a processor's worker is running at all, as `passk status` shows it: what its
supervisor says (supervisord, as `make up` runs the workers) and whether its consumer
group has a member. A worker that is down is shown as down, not only as a restart count."""

from __future__ import annotations

import configparser
import hashlib
import os
import socket
import stat
import tempfile
import xmlrpc.client
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.contract.exits import UsageError

# supervisord's states of a program that is not running, and will not be without help
# (FATAL, STOPPED), or is between failed starts (BACKOFF, EXITED).
NOT_RUNNING = frozenset({"FATAL", "EXITED", "BACKOFF", "STOPPED", "STOPPING", "UNKNOWN"})
RPC_TIMEOUT_S = 3.0


# A unix socket's path holds at most 107 bytes, and supervisord first binds
# "<file>.<its pid>", then hard-links that to the name and unlinks it: a longer path
# refuses to start ("AF_UNIX path too long"), as a checkout in a deep directory would.
MAX_SOCKET_PATH = 96


class SocketPlaceError(UsageError):
    """No place for supervisord's socket that only this user can reach."""


def socket_in(run_dir: Path) -> Path:
    """Where supervisord listens for a run directory: run_dir/supervisor.sock, or, when that
    path is too long for a unix socket, a short one named by the run directory's own path
    (so each checkout has its own) in a directory only this user can enter: the
    temporary directory is everyone's, and a socket there could be taken first by another
    user, who would then answer `passk status` and `make down`."""
    run_dir = run_dir.resolve()
    natural = run_dir / "supervisor.sock"
    if len(os.fsencode(natural)) <= MAX_SOCKET_PATH:
        return natural
    digest = hashlib.sha256(os.fsencode(run_dir)).hexdigest()[:16]
    place, runtime = socket_place()
    sock = place / f"passk-supervisor-{digest}.sock"
    if len(os.fsencode(sock)) > MAX_SOCKET_PATH:  # before making anything there
        shorter = (
            "set XDG_RUNTIME_DIR to a shorter directory, or unset it to use TMPDIR's"
            if runtime
            else "set TMPDIR (or XDG_RUNTIME_DIR) to a shorter directory"
        )
        raise SocketPlaceError(
            f"supervisord's socket needs a path of at most {MAX_SOCKET_PATH} bytes: "
            f"{natural} is too long and so is {sock}; use a checkout nearer the root, or " + shorter
        )
    private_dir(place, runtime)
    return sock


def socket_place() -> tuple[Path, bool]:
    """The directory for supervisord's socket when the run directory's is too long, and
    whether it is $XDG_RUNTIME_DIR (the login session's own directory; a relative one is
    ignored, as the XDG Base Directory specification says), else <tempdir>/passk-<uid>."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return Path(runtime), True
    return Path(tempfile.gettempdir()) / f"passk-{os.getuid()}", False


def private_dir(place: Path, runtime: bool) -> None:
    """Make <tempdir>/passk-<uid> mode 0700 if it is not there; refuse either place unless
    it is a directory of this user's that no one else may enter, and not a link (one made
    by someone else first would be theirs)."""
    made = False
    if not runtime:
        try:
            place.mkdir(mode=0o700)
            made = True
        except FileExistsError:
            pass
        except OSError as exc:
            raise SocketPlaceError(
                f"cannot make the directory for supervisord's socket {place} "
                f"({exc.strerror}); set TMPDIR or XDG_RUNTIME_DIR to a directory of "
                "yours"
            ) from exc
    if (problem := not_private(place)) is not None:
        if runtime:
            where = "XDG_RUNTIME_DIR"
            hint = " (unset it, or make it a directory of yours of mode 0700)"
        else:
            where = "the directory for supervisord's socket"
            hint = "" if made else " (remove it, or set XDG_RUNTIME_DIR)"
        raise SocketPlaceError(
            f"{where} {place} {problem}; refusing to put supervisord's socket there" + hint
        )


def not_private(place: Path) -> str | None:
    """Why `place` is not a directory only this user can enter, or None."""
    try:
        found = os.lstat(place)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(found.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(found.st_mode):
        return "is not a directory"
    if found.st_uid != os.getuid():
        return f"belongs to uid {found.st_uid}, not to this user ({os.getuid()})"
    if found.st_mode & 0o077:
        return f"is open to other users (mode {stat.S_IMODE(found.st_mode):o})"
    return None


def configured_socket(conf: Path) -> Path | None:
    """The unix socket a written supervisord configuration names (`serverurl`), None when
    it names none; SocketPlaceError when it is outside the configuration's own directory
    in a directory no longer this user's alone (a tmp cleaner removed ours, another user
    made theirs there): what answers on it would be theirs."""
    parser = configparser.RawConfigParser(strict=False)
    try:
        parser.read(conf)
        url = parser.get("supervisorctl", "serverurl", fallback="")
    except (OSError, ValueError, configparser.Error):  # ValueError: not text
        url = ""
    if not url.startswith("unix://"):
        return None
    sock = Path(url[len("unix://") :])
    if sock.parent == conf.parent.resolve():
        return sock
    if (problem := not_private(sock.parent)) is not None:
        raise SocketPlaceError(
            f"{conf} names supervisord's socket {sock}, but {sock.parent} {problem}; "
            "refusing to talk to whatever listens there (stop our supervisord by its pid, "
            f"then remove {conf})"
        )
    return sock


def supervisor_socket(data_dir: Path) -> Path:
    """Where `make up`'s supervisord listens: the `serverurl` its configuration says
    (`var/run/supervisord.conf`, written by `passk supervise config`), so that a reader
    finds it whatever its own environment; where it would be, when none was written."""
    run_dir = (data_dir / "run").resolve()
    try:
        sock = configured_socket(run_dir / "supervisord.conf")
    except SocketPlaceError:
        return run_dir / "supervisor.sock"  # asked nowhere else: no supervisord found
    if sock is not None:
        return sock
    try:
        return socket_in(run_dir)
    except SocketPlaceError:
        return run_dir / "supervisor.sock"


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
    *,
    supervisor_state: str | None,
    group_known: bool,
    members: int,
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
            return (
                f"no member in its consumer group {up_s:.0f} s after its start "
                "(its process runs: hung, or it cannot join)"
            )
    # Running (or starting) under its supervisor but not in its group yet: joining, or
    # rebalancing; `status` shows it not ready, not down.
    return None


def stall_reason(
    health: dict[str, Any] | None, now: float, stall_after_s: float, alive: Callable[[int], bool]
) -> str | None:
    """Why a worker whose process is alive does nothing: its event loop has not written
    its heartbeat for `stall_after_s` (kill -STOP, a blocked loop). A dead process's file
    says nothing (its supervisor and its group tell); nor does one without a heartbeat."""
    if not health or not isinstance(health.get("beat_at"), int | float):
        return None
    silent = now - float(health["beat_at"])
    pid = health.get("pid")
    if silent <= stall_after_s or not isinstance(pid, int) or not alive(pid):
        return None
    return f"no heartbeat for {silent:.0f} s from pid {pid}, which is alive (stopped or hung)"


def pid_alive(pid: int) -> bool:
    """Whether a process of that id exists on this host (a stopped one does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
