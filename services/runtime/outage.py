"""Living through an outage of the broker or the store.

A worker's timers and agents call the broker and the store. When one of them is down,
the call fails; the worker must not. `Dependency` is what a caller keeps per thing it
depends on: it says when to try again (exponential backoff), logs once when an outage
starts and once when it ends (never per attempt), counts every failure
(`passk_broker_errors_total`, `passk_store_errors_total`), and shows the outage as
`passk_degraded{dependency=...} 1` on /metrics and in the worker's health file, which
`passk status` reads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import Counter

from services.contract.metrics import MetricSet, counter, gauge

log = logging.getLogger(__name__)
T = TypeVar("T")

BROKER = "broker"
STORE = "store"
# A call that has not returned after this long counts as an outage while it waits: a
# locked SQLite file holds a write for its 30 s busy timeout before failing, and a store
# that hangs never fails at all; `passk status` must say degraded meanwhile, not ok.
SLOW_AFTER_S = 10.0
# Every worker rewrites its health file this often (`beat_at`); a live process whose file
# is older than STALL_AFTER_S (kill -STOP, a blocked event loop) is shown as stalled.
HEARTBEAT_S = 5.0
STALL_AFTER_S = 30.0


class OutageMetrics(MetricSet):
    broker_errors = counter(
        "passk_broker_errors_total",
        "Failed calls to the Kafka broker from a worker's code, by operation.",
        "operation",
    )
    store_errors = counter(
        "passk_store_errors_total",
        "Failed calls to the SQL store from a worker, by operation.",
        "operation",
    )
    degraded = gauge(
        "passk_degraded",
        "1 while the worker cannot reach a dependency (broker or store).",
        "dependency",
    )
    heartbeat = gauge(
        "passk_worker_heartbeat_timestamp_seconds",
        "When the worker's event loop last ran its heartbeat (Unix "
        "time); far behind time() means it is stopped or hung.",
    )

    def errors(self, dependency: str) -> Counter:
        return self.broker_errors if dependency == BROKER else self.store_errors


@lru_cache(maxsize=1)
def outage_metrics() -> OutageMetrics:
    """The process-wide instance on the default registry (one per worker process)."""
    return OutageMetrics()


class Health:
    """The worker's health file (`<data_dir>/run/<processor>.health.json`): pid, start
    count, and which dependencies are down since when. Written on change only."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.down: dict[str, dict[str, float]] = {}  # kind -> caller -> down since
        self.state: dict[str, Any] = {}

    def started(self, processor: str) -> None:
        """Count this start: a start after the first is a restart (by supervisord/systemd)."""
        previous = read_health(self.path) if self.path else None
        starts = int(previous.get("starts", 0)) + 1 if previous else 1
        self.state = {
            "processor": processor,
            "pid": os.getpid(),
            "starts": starts,
            "started_at": _iso(time.time()),
        }
        self._write()

    def mark(self, kind: str, caller: str, since: float | None, metrics: OutageMetrics) -> None:
        """A kind is degraded while any of this worker's callers finds it down."""
        callers = self.down.setdefault(kind, {})
        if since is None:
            callers.pop(caller, None)
        else:
            callers[caller] = since
        metrics.degraded.labels(kind).set(1 if callers else 0)
        self._write()

    def beat(self, metrics: OutageMetrics, now: float | None = None) -> None:
        """The event loop is alive: say so in the file and on /metrics."""
        now = time.time() if now is None else now
        self.state["beat_at"] = now
        metrics.heartbeat.set(now)
        self._write()

    def degraded(self) -> dict[str, str]:
        return {kind: _iso(min(c.values())) for kind, c in self.down.items() if c}

    def _write(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**self.state, "degraded": self.degraded()}))
        os.replace(tmp, self.path)  # a reader never sees half a file


def health_path(data_dir: Path, processor: str) -> Path:
    return data_dir / "run" / f"{processor}.health.json"


def read_health(path: Path | None) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text()) if path else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_health = Health(None)


def health() -> Health:
    """The process-wide health file; a worker points it at its path on start."""
    return _health


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


class Dependency:
    """One dependency as one caller sees it: up, or down since when, and when to retry."""

    def __init__(
        self,
        kind: str,
        what: str,
        *,
        first_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        metrics: OutageMetrics | None = None,
        logger: logging.Logger = log,
        slow_after_s: float | None = SLOW_AFTER_S,
    ) -> None:
        self.kind, self.what = kind, what
        self.slow_after_s = slow_after_s
        self.first_backoff_s, self.max_backoff_s = first_backoff_s, max_backoff_s
        self._clock = clock
        self._metrics = metrics
        self._log = logger
        self.down_since: float | None = None  # wall time, for people
        self.failures = 0  # consecutive
        self._next_try = 0.0

    @property
    def metrics(self) -> OutageMetrics:
        return self._metrics or outage_metrics()

    @property
    def up(self) -> bool:
        return self.down_since is None

    def due(self) -> bool:
        """Whether a caller that may skip a round (a timer) should try now."""
        return self._clock() >= self._next_try

    def backoff_s(self) -> float:
        if self.failures == 0:
            return 0.0
        return min(self.first_backoff_s * 2 ** (self.failures - 1), self.max_backoff_s)

    def failed(self, operation: str, exc: BaseException) -> float:
        """Record a failure; returns how long to wait before the next try."""
        self.failures += 1
        self.metrics.errors(self.kind).labels(operation).inc()
        if self.down_since is None:
            self.down_since = time.time()
            health().mark(self.kind, self.what, self.down_since, self.metrics)
        if self.failures == 1:  # the first failure of an outage (a slow call may have begun it)
            self._log.warning(
                "%s unreachable (%s: %s: %s); retrying with backoff until it returns",
                self.kind,
                self.what,
                type(exc).__name__,
                exc,
            )
        delay = self.backoff_s()
        self._next_try = self._clock() + delay
        return delay

    def slow(self, operation: str) -> None:
        """A call has not returned for `slow_after_s`: degraded from when it began."""
        if self.down_since is not None:
            return
        self.down_since = time.time() - (self.slow_after_s or 0.0)
        health().mark(self.kind, self.what, self.down_since, self.metrics)
        self._log.warning(
            "%s not answering (%s: %s waiting for %.0f s); degraded until it returns",
            self.kind,
            self.what,
            operation,
            self.slow_after_s or 0.0,
        )

    def succeeded(self) -> None:
        if self.down_since is not None:
            self._log.warning(
                "%s reachable again (%s) after %.0f s and %d failed tries",
                self.kind,
                self.what,
                time.time() - self.down_since,
                self.failures,
            )
            self.down_since = None
            health().mark(self.kind, self.what, None, self.metrics)
        self.failures = 0
        self._next_try = 0.0

    async def call(
        self,
        operation: str,
        fn: Callable[[], Awaitable[T]],
        retry_on: tuple[type[BaseException], ...] = (Exception,),
    ) -> T:
        """Await fn() until it succeeds, backing off between tries (for agents, which must
        not skip the record they hold)."""
        loop = asyncio.get_running_loop()
        while True:
            watch = (
                loop.call_later(self.slow_after_s, self.slow, operation)
                if self.slow_after_s
                else None
            )
            try:
                result = await fn()
            except retry_on as exc:
                delay = self.failed(operation, exc)
                if watch is not None:
                    watch.cancel()
                await asyncio.sleep(delay)
                continue
            finally:
                if watch is not None:
                    watch.cancel()
            self.succeeded()
            return result
