"""Publishing a few records a command made (labels, calibrations) and waiting until the
broker has every one: the commands' own sends, not traffic (services/kafka/producer.py)."""

from __future__ import annotations

from collections.abc import Iterable

from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.kafka_client import kafka_client_kwargs


def send_all(settings: Settings, topic: Topic, records: Iterable[tuple[str, bytes]]) -> None:
    """Publish (key, value) records to `topic` and wait until the broker acknowledged every
    one (acks=all, at most 30 s); raises what the producer raised when it could not.
    Idempotent, said so a conflicting setting raises: the records of one key stay in the
    order sent across a retried send (the last calibration of a judge is its current one)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        **kafka_client_kwargs(settings),
        acks="all",
        enable_idempotence=True,
        request_timeout_ms=15000,
        max_block_ms=15000,
    )
    try:
        name = topic_name(topic, settings)
        futures = [producer.send(name, key=key.encode(), value=value) for key, value in records]
        producer.flush(timeout=30)
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close(timeout=10)
