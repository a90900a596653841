"""Stream health on every worker's /metrics: how far each input topic goes and how much of
it the worker's consumer group has yet to read, polled from the broker.

Read from the broker (committed offsets against end offsets), the same figures as
`passk status`, rather than from Faust's in-memory positions: what an operator needs is
what a restart would have to redo, and the broker's view is the same from every worker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from services.contract.metrics import MetricSet, gauge
from services.contract.processors import inputs_of
from services.contract.settings import Settings
from services.contract.topics import topic_name
from services.kafka.kafka_client import kafka_client_kwargs

log = logging.getLogger(__name__)


class LagMetrics(MetricSet):
    lag = gauge(
        "passk_consumer_lag",
        "Records on an input topic not yet consumed and committed by the processor.",
        "processor",
        "topic",
    )
    end = gauge(
        "passk_input_end_offset",
        "Records ever written to a processor's input topic (sum of partition end "
        "offsets): its rate says whether inputs arrive.",
        "processor",
        "topic",
    )


@lru_cache(maxsize=1)
def lag_metrics() -> LagMetrics:
    """The process-wide instance on the default registry."""
    return LagMetrics()


class LagMonitor:
    """Polls one processor's input offsets; blocking (kafka-python), so run it in a thread."""

    def __init__(self, processor: str, settings: Settings, metrics: LagMetrics) -> None:
        self.processor = processor
        self.group = f"{settings.topic_prefix}{processor}"
        self.topics = [topic_name(t, settings) for t in inputs_of(processor)]
        # with the worker's own credentials: on a secured broker a bare client is refused
        self.client_kwargs = kafka_client_kwargs(settings)
        self.metrics = metrics
        self._clients: tuple[Any, Any] | None = None

    def poll(self) -> None:
        if not self.topics:
            return
        try:
            if self._clients is None:
                self._clients = (
                    # short: a poll waiting on a dead broker only delays the next one
                    KafkaAdminClient(
                        **self.client_kwargs, request_timeout_ms=5000, bootstrap_timeout_ms=5000
                    ),
                    KafkaConsumer(**self.client_kwargs),
                )
            admin, consumer = self._clients
            offsets = input_offsets(admin, consumer, self.group, self.topics)
        except Exception as exc:  # a broker outage must not stop the worker; try again later
            log.warning("consumer lag of %s unknown: %s", self.processor, exc)
            self.close()
            return
        for topic, figures in offsets.items():
            self.metrics.lag.labels(self.processor, topic).set(figures.lag)
            self.metrics.end.labels(self.processor, topic).set(figures.end)

    def close(self) -> None:
        if self._clients is not None:
            for client in self._clients:
                try:
                    client.close()
                except Exception:  # closing a client of a dead broker may raise; nothing to keep
                    pass
            self._clients = None


@dataclass(frozen=True)
class InputOffsets:
    end: int  # records ever written to the topic (sum of its partitions' end offsets)
    lag: int  # of those, not yet consumed and committed by the group


def input_offsets(
    admin: KafkaAdminClient, consumer: KafkaConsumer, group: str, topics: list[str]
) -> dict[str, InputOffsets]:
    """Per input topic, how far it goes and how much the group has yet to read; a
    partition with no commit yet counts whole, since processors start from the earliest
    offset. Topics that do not exist yet are left out."""
    try:
        committed = admin.list_group_offsets({group: None}).get(group) or {}
    except KafkaError as exc:
        if getattr(exc, "retriable", False):
            # Unknown for now (a coordinator moving): counting every record as unread
            # would show a lag that is not there.
            raise
        committed = {}  # the group does not exist yet
    partitions = []
    for topic in topics:
        for p in consumer.partitions_for_topic(topic) or ():
            partitions.append(TopicPartition(topic, p))
    if not partitions:
        return {}
    ends = consumer.end_offsets(partitions)
    out: dict[str, InputOffsets] = {}
    for tp in partitions:
        done = committed.get(tp)
        start = done.offset if done is not None and done.offset >= 0 else 0
        before = out.get(tp.topic, InputOffsets(0, 0))
        out[tp.topic] = InputOffsets(before.end + ends[tp], before.lag + max(ends[tp] - start, 0))
    return out
