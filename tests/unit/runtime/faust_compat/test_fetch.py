"""What a processor asks of the broker's fetches reaches the aiokafka consumer Faust builds
for it (and only for it): the aggregate lets the broker gather its trickling input."""

from __future__ import annotations

import asyncio
from pathlib import Path

import faust
from prometheus_client import CollectorRegistry

from services.contract.settings import Settings
from services.runtime.app import make_app


def built_fetch(app: faust.App) -> tuple[int, int]:
    """(fetch_min_bytes, fetch_max_wait_ms) of the worker consumer Faust creates for `app`."""

    async def build() -> tuple[int, int]:
        consumer = app.consumer._thread._create_worker_consumer(app.transport)
        try:
            return consumer._fetch_min_bytes, consumer._fetch_max_wait_ms
        finally:
            await consumer.stop()

    return asyncio.run(build())


def test_a_processor_asking_for_fuller_fetches_gets_them_and_the_others_keep_fausts(
    tmp_path: Path,
) -> None:
    settings = Settings(PASSK_TOPIC_PREFIX="fetch.", PASSK_DATA_DIR=str(tmp_path))  # type: ignore[call-arg]
    patient = make_app("patient", settings, fetch_min_bytes=100_000, fetch_max_wait_ms=500)
    plain = make_app("plain", settings)
    assert built_fetch(patient) == (100_000, 500)
    assert built_fetch(plain) == (1, 1500)  # faust-streaming's own


def test_the_aggregate_asks_for_fuller_fetches(tmp_path: Path) -> None:
    from services.aggregate.app import build

    settings = Settings(PASSK_TOPIC_PREFIX="fetch.", PASSK_DATA_DIR=str(tmp_path))  # type: ignore[call-arg]
    min_bytes, max_wait_ms = built_fetch(build(settings, registry=CollectorRegistry()))
    assert min_bytes > 1 and max_wait_ms <= 1000
