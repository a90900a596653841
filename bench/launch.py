"""Starting, measuring and stopping `passk` processes for the benchmarks (one place, used by
pipeline.py, aggregate_overhead.py and worker_throughput.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def profilers(
    workers: dict[str, subprocess.Popen[bytes]], names: list[str], out: Path, *, gil: bool = False
) -> list[subprocess.Popen[bytes]]:
    """py-spy attached to the named workers, writing collapsed stacks to `out` when
    stopped with SIGINT (see `stop_profilers`; summarise with bench/profile_top.py).
    `gil`: only samples holding the GIL, i.e. CPU; without it a thread waiting to take
    the GIL back after a socket call (Faust's consumer thread holds it meanwhile) counts
    as busy on that call's line."""
    if not names:
        return []
    spy = Path(sys.executable).with_name("py-spy")
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    return [
        subprocess.Popen(
            [
                str(spy),
                "record",
                "-p",
                str(workers[name].pid),
                "-r",
                "50",
                *(["--gil"] if gil else []),
                "-f",
                "raw",
                "--nonblocking",
                "-o",
                str(out / f"{stamp}-{name}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name in names
        if name in workers
    ]


def stop_profilers(spies: Iterable[subprocess.Popen[bytes]]) -> None:
    spies = list(spies)
    for spy in spies:  # py-spy writes its profile when interrupted
        spy.send_signal(signal.SIGINT)
    for spy in spies:
        spy.wait(60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(env: dict[str, str], *args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    """`passk ARGS` in a session of its own (so `stop` ends it with its children)."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # lives with the process
    return subprocess.Popen(
        [sys.executable, "-m", "services.cli", *args],
        env=env,
        cwd=ROOT,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(procs: Iterable[subprocess.Popen[bytes]], grace_s: float = 30.0) -> None:
    """SIGTERM each process group, then SIGKILL what has not exited after `grace_s`."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def wait_until(
    condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.5
) -> Any:
    """The condition's first true value; TimeoutError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = condition()
        if got:
            return got
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int, field: str = "VmHWM") -> float | None:
    """A live process's peak resident memory (VmHWM), or with field="VmRSS" its resident
    memory now, in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
