"""The consumer-lag figures every worker exports, read from the real broker: per input
topic, what was written and what the processor's group has yet to commit."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client import CollectorRegistry

from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.lag import LagMetrics, LagMonitor

pytestmark = pytest.mark.integration


def test_lag_is_what_the_group_has_not_committed_per_input_topic(settings: Settings) -> None:
    finished = topic_name(Topic.CONVERSATION_FINISHED, settings)
    persisted = topic_name(Topic.SESSION_PERSISTED, settings)
    producer = KafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers)
    for _ in range(7):
        producer.send(finished, b"{}", partition=0).get(30)
    for _ in range(3):
        producer.send(persisted, b"{}", partition=1).get(30)
    producer.close()

    # the gate's group has committed 5 of the 7 on partition 0 of conversation-finished
    group = KafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        group_id=f"{settings.topic_prefix}gate",
        enable_auto_commit=False,
    )
    group.commit({TopicPartition(finished, 0): OffsetAndMetadata(5, "", -1)})
    group.close()

    registry = CollectorRegistry()
    metrics = LagMetrics(registry)
    monitor = LagMonitor("gate", settings, metrics)
    try:
        monitor.poll()
    finally:
        monitor.close()

    def value(name: str, topic: str) -> float | None:
        return registry.get_sample_value(name, {"processor": "gate", "topic": topic})

    assert value("passk_consumer_lag", finished) == 2
    assert value("passk_input_end_offset", finished) == 7
    # nothing committed on session-persisted: all of it is still to read
    assert value("passk_consumer_lag", persisted) == 3
    assert value("passk_input_end_offset", persisted) == 3


def test_a_broker_that_does_not_answer_leaves_the_figures_unknown(settings: Settings) -> None:
    registry = CollectorRegistry()
    down = settings.model_copy(update={"kafka_bootstrap_servers": "127.0.0.1:1"})
    monitor = LagMonitor("gate", down, LagMetrics(registry))
    monitor.poll()  # logs and returns; a worker must not die of it
    monitor.close()
    assert (
        registry.get_sample_value(
            "passk_consumer_lag",
            {"processor": "gate", "topic": topic_name(Topic.CONVERSATION_FINISHED, settings)},
        )
        is None
    )


def test_a_processor_with_no_worker_running_is_shown_down(settings: Settings) -> None:
    """No supervisord here and nothing in the gate's group: `passk status` says DOWN."""
    import subprocess
    import sys

    from services.cli.status import processor_status
    from tests.support import ROOT, isolated_env

    [gate] = processor_status(["gate"], settings)
    assert gate.down == "no member in its consumer group" and not gate.ready
    shown = subprocess.run(
        [sys.executable, "-m", "services.cli", "status", "--processors", "gate"],
        cwd=ROOT,
        env=isolated_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert "DOWN: no member in its consumer group" in shown.stdout
