"""Letting the broker gather records before it answers a worker's fetch (installed by
`apply`).

faust-streaming 0.15.3 builds its aiokafka consumer with `fetch_min_bytes` left at 1: the
broker answers a fetch as soon as one record is there. A worker whose input trickles in
(the aggregate reads a verdict or two at a time as the verdict processor emits them) then
runs a fetch, and a hand-over from Faust's consumer thread to its event loop, for every
record or two; in the aggregate that was half its CPU (bench/README.md). `make_app(...,
fetch_min_bytes=N, fetch_max_wait_ms=T)` lets the broker hold a fetch until N bytes have
gathered or T ms passed: fewer, fuller fetches, at up to T ms more latency, for a
processor where that latency does not matter. Without them Faust's consumer is as built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faust
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from services.runtime.faust_compat.patching import Patch


@dataclass(frozen=True)
class Fetch:
    min_bytes: int
    max_wait_ms: int


_FETCH: dict[str, Fetch] = {}  # app id -> what its worker consumer asks of the broker


def set_fetch(app: faust.App, min_bytes: int, max_wait_ms: int) -> None:
    _FETCH[app.conf.id] = Fetch(min_bytes, max_wait_ms)


def _install() -> None:
    """Wrap faust's worker-consumer factory to pass on what `set_fetch` asked."""
    original = AIOKafkaConsumerThread._create_worker_consumer

    def _create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        fetch = _FETCH.get(self.app.conf.id)
        if fetch is not None:
            # Read by the consumer's start(), which builds its Fetcher from them.
            consumer._fetch_min_bytes = fetch.min_bytes
            consumer._fetch_max_wait_ms = fetch.max_wait_ms
        return consumer

    AIOKafkaConsumerThread._create_worker_consumer = _create_worker_consumer  # type: ignore[method-assign]


PATCH = Patch(_install)
