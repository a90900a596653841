"""Creating passk's topics (idempotent) with kafka-python's admin client."""

from __future__ import annotations

from dataclasses import dataclass

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from services.common.settings import Settings, get_settings
from services.common.topics import TOPIC_SPECS, partitions_for, topic_configs, topic_name


@dataclass(frozen=True)
class TopicStatus:
    name: str
    partitions: int
    created: bool  # False: it already existed


def create_topics(settings: Settings | None = None) -> list[TopicStatus]:
    settings = settings or get_settings()
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    try:
        existing = set(admin.list_topics())
        statuses: list[TopicStatus] = []
        for spec in TOPIC_SPECS:
            name = topic_name(spec.topic, settings)
            parts = partitions_for(spec, settings)
            if name in existing:
                statuses.append(TopicStatus(name, parts, created=False))
                continue
            try:
                admin.create_topics(
                    [NewTopic(name, parts, 1, topic_configs=topic_configs(spec, settings))]
                )
                statuses.append(TopicStatus(name, parts, created=True))
            except TopicAlreadyExistsError:  # created concurrently by another caller
                statuses.append(TopicStatus(name, parts, created=False))
        return statuses
    finally:
        admin.close()
