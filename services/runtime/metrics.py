"""Metrics every processor shares, and serving /metrics.

Names follow prometheus/client_python conventions: `passk_` namespace, base units,
counters ending in `_total`, low-cardinality labels only (never trial or session ids).
"""

from __future__ import annotations

import logging
from functools import lru_cache

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

from services.contract.metrics import MetricSet, counter, histogram

log = logging.getLogger(__name__)


class CommonMetrics(MetricSet):
    dead_letters = counter(
        "passk_dead_letters_total",
        "Input messages sent to the dead-letter topic, by source topic and reason.",
        "topic",
        "reason",
    )
    events = counter(
        "passk_events_total",
        "Events a processor handled, by processor and what it made of them.",
        "processor",
        "note",
    )
    verdict_latency = histogram(
        "passk_verdict_latency_seconds",
        "From the conversation finishing to its trial verdict.",
        # Up to a week: a replay of old traffic is graded long after it finished.
        buckets=(
            0.1,
            0.25,
            0.5,
            1,
            2.5,
            5,
            10,
            30,
            60,
            120,
            300,
            600,
            1800,
            3600,
            21600,
            86400,
            604800,
        ),
    )


_served: set[int] = set()


def serve_metrics(
    port: int, registry: CollectorRegistry = REGISTRY, host: str = "127.0.0.1"
) -> None:
    """Expose /metrics on host:port (0 = don't serve); loopback unless configured."""
    if port and port not in _served:
        start_http_server(port, addr=host, registry=registry)
        _served.add(port)
        log.info("metrics on http://%s:%d/metrics", host, port)


@lru_cache(maxsize=1)
def common_metrics() -> CommonMetrics:
    """The process-wide instance on the default registry (one per worker process)."""
    return CommonMetrics()
