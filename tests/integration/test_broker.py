"""The broker the suite runs against is the real Apache Kafka 4.x that infra/kafka pins,
and both clients passk uses speak to it."""

from __future__ import annotations

import re

import pytest
from aiokafka import AIOKafkaProducer
from kafka import KafkaProducer

from tests.support import ROOT

pytestmark = pytest.mark.integration


def test_pinned_kafka_is_4x() -> None:
    pom = (ROOT / "infra" / "kafka" / "pom.xml").read_text()
    version = re.search(r"<kafka.version>([\d.]+)</kafka.version>", pom)
    assert version and version.group(1).startswith("4."), "pin Apache Kafka 4.x"


def test_kafka_python_negotiates_kafka_4(kafka_bootstrap: str) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        # kafka-python probes ApiVersions: 4.x brokers answer with 4.x request versions
        assert producer.config["api_version"] >= (4, 0)
    finally:
        producer.close()


async def test_aiokafka_connects_and_fetches_metadata(kafka_bootstrap: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        assert await producer.client.fetch_all_metadata() is not None
        assert producer.client.cluster.brokers(), "no broker in the metadata"
    finally:
        await producer.stop()
