"""Creating passk's topics (idempotent) with kafka-python's admin client."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from services.contract.processors import TOPIC_SPECS
from services.contract.settings import Settings
from services.contract.topics import partitions_for, topic_configs, topic_name
from services.kafka.kafka_client import kafka_client_kwargs, retrying

T = TypeVar("T")

# How long create_topics waits for the topics it created to be served with a leader for
# every partition. The controller has them when CreateTopics answers, but a busy broker's
# metadata can lag by seconds, and a client then reads "no such topic" (seen in CI).
TOPICS_SERVED_S = 30.0


@dataclass(frozen=True)
class TopicStatus:
    name: str
    partitions: int
    created: bool  # False: it already existed
    replication: int = 1


def replication_for(brokers: int, configured: int = 0) -> int:
    """Replicas per partition: the setting when given, else every broker up to three."""
    return configured or max(1, min(3, brokers))


def min_insync_for(replication: int) -> int:
    """With three replicas a write needs two (one broker may be lost); with fewer, one."""
    return 2 if replication >= 3 else 1


def cluster_brokers(admin: KafkaAdminClient) -> int:
    return len(admin.describe_cluster().get("brokers") or []) or 1


def topic_replication(settings: Settings) -> int:
    """The replication passk uses on this cluster (asks the broker when the setting is 0)."""
    if settings.topic_replication:
        return settings.topic_replication
    admin = KafkaAdminClient(**kafka_client_kwargs(settings))
    try:
        return replication_for(cluster_brokers(admin))
    finally:
        admin.close()


def create_topics_retrying(settings: Settings, deadline_s: float = 120.0) -> list[TopicStatus]:
    """create_topics, retried while the failure is one a cluster recovers from by itself
    (a broker just lost and still in the metadata, a leader moving)."""
    return retrying(lambda: create_topics(settings), deadline_s=deadline_s)


def create_topics(settings: Settings) -> list[TopicStatus]:
    admin = KafkaAdminClient(**kafka_client_kwargs(settings))
    try:
        replication = replication_for(cluster_brokers(admin), settings.topic_replication)
        durability = {"min.insync.replicas": str(min_insync_for(replication))}
        existing = set(admin.list_topics())
        wanted = [
            (
                topic_name(spec.topic, settings),
                partitions_for(spec, settings),
                {**topic_configs(spec, settings), **durability},
            )
            for spec in TOPIC_SPECS
        ]
        missing = [
            (name, parts, configs) for name, parts, configs in wanted if name not in existing
        ]
        made: set[str] = set()
        try:
            # All in one request: a fresh broker gets its few dozen topics in one round trip.
            if missing:
                admin.create_topics(
                    [
                        NewTopic(name, parts, replication, topic_configs=configs)
                        for name, parts, configs in missing
                    ]
                )
                made = {name for name, _, _ in missing}
        except TopicAlreadyExistsError:  # some created concurrently by another caller
            for name, parts, configs in missing:
                try:
                    admin.create_topics([NewTopic(name, parts, replication, topic_configs=configs)])
                    made.add(name)
                except TopicAlreadyExistsError:
                    pass
        statuses = [
            TopicStatus(name, parts, name in made, replication) for name, parts, _ in wanted
        ]
        await_served(admin, [s.name for s in statuses if s.created])
        return statuses
    finally:
        admin.close()


def await_served(
    admin: KafkaAdminClient, names: list[str], timeout_s: float = TOPICS_SERVED_S
) -> bool:
    """Wait until the broker serves every one of `names` with a leader for each partition
    (or `timeout_s` passes: the caller then goes on, and a client says what it finds)."""
    deadline = time.monotonic() + timeout_s
    while names:
        try:
            described = admin.describe_topics(names)
        except KafkaError:
            described = []
        served = {
            t["name"]
            for t in described
            if not t.get("error_code")
            and t.get("partitions")
            and all(p.get("leader_id", -1) >= 0 for p in t["partitions"])
        }
        if served >= set(names):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def ask_admin(settings: Settings, question: Callable[[KafkaAdminClient], T]) -> T:
    """question(admin) on an admin client of its own, closed after; asked again, on a
    fresh client, while Kafka marks the failure retriable (`retrying`: a broker just lost
    is still listed in the metadata each new client starts from)."""

    def ask() -> T:
        admin = KafkaAdminClient(**kafka_client_kwargs(settings))
        try:
            return question(admin)
        finally:
            admin.close()

    return retrying(ask)


def partition_counts(names: list[str], settings: Settings) -> dict[str, int]:
    """How many partitions each of these topics has on the broker (absent: not listed)."""
    described = ask_admin(settings, lambda admin: admin.describe_topics(names))
    return {t["name"]: len(t.get("partitions") or ()) for t in described if not t.get("error_code")}
