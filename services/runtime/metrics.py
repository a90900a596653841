"""Metrics every processor shares, and serving /metrics.

Names follow prometheus/client_python conventions: `passk_` namespace, base units,
counters ending in `_total`, low-cardinality labels only (never trial or session ids).
"""

from __future__ import annotations

import logging

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server

log = logging.getLogger(__name__)


class CommonMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.dead_letters = Counter(
            "passk_dead_letters_total",
            "Input messages sent to the dead-letter topic, by source topic and reason.",
            ["topic", "reason"],
            registry=registry,
        )
        self.events = Counter(
            "passk_events_total",
            "Events a processor handled, by processor and what it made of them.",
            ["processor", "note"],
            registry=registry,
        )
        self.verdict_latency = Histogram(
            "passk_verdict_latency_seconds",
            "From the conversation finishing to its trial verdict.",
            # Up to a week: a replay of old traffic is graded long after it finished.
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 21600,
                     86400, 604800),
            registry=registry,
        )


_served: set[int] = set()


def serve_metrics(port: int, registry: CollectorRegistry = REGISTRY,
                  host: str = "127.0.0.1") -> None:
    """Expose /metrics on host:port (0 = don't serve); loopback unless configured."""
    if port and port not in _served:
        start_http_server(port, addr=host, registry=registry)
        _served.add(port)
        log.info("metrics on http://%s:%d/metrics", host, port)


_common: CommonMetrics | None = None


def common_metrics() -> CommonMetrics:
    """The process-wide instance on the default registry (one per worker process)."""
    global _common
    if _common is None:
        _common = CommonMetrics()
    return _common
