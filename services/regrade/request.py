"""Asking the gate and the judge to grade trials again: find each trial's inputs in the
log, prepare its request, send it and wait for every acknowledgement. The use case behind
`passk regrade`, and what `passk audit --repair` is handed for trials stuck before their
verdict (services/cli/wiring.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kafka import KafkaProducer

from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.kafka_client import kafka_client_kwargs
from services.regrade.log import find_inputs
from services.regrade.plan import Prepared, Target, prepare

Progress = Callable[[str, int, int | None], None]  # (step, done, total)


def request_regrades(
    settings: Settings,
    chosen: Sequence[Target],
    *,
    reason: str,
    progress: Progress | None = None,
    sample_rate: float | None = None,
) -> list[Prepared]:
    """Each chosen trial's request as sent, or why it was not."""

    def tell(step: str, done: int, total: int | None) -> None:
        if progress:
            progress(step, done, total)

    found = find_inputs(
        chosen, settings, progress=lambda done, total: tell("reading the log", done, total)
    )
    prepared = prepare(
        chosen, found, reason=reason, max_bytes=settings.max_event_bytes, sample_rate=sample_rate
    )
    # Idempotent (kafka-python 3.0.12's default, said here so a conflicting setting
    # raises): a retried send neither doubles nor reorders a request.
    producer = KafkaProducer(
        **kafka_client_kwargs(settings),
        acks="all",
        enable_idempotence=True,
        request_timeout_ms=15000,
        max_block_ms=15000,
        max_request_size=settings.max_event_bytes + 4096,
    )
    try:
        name = topic_name(Topic.REGRADE_REQUESTS, settings)
        futures = [
            producer.send(name, key=p.target.identity.trial_id.encode(), value=p.payload)
            for p in prepared
            if p.payload is not None
        ]
        for i, future in enumerate(futures, 1):
            future.get(timeout=30)
            tell("requesting", i, len(futures))
    finally:
        producer.close(timeout=10)
    return prepared
