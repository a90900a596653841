"""How the processors stand: consumer group state, members and lag, read from the broker."""

from __future__ import annotations

from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from services.common.kafka_client import kafka_client_kwargs
from services.common.settings import Settings, get_settings
from services.common.topics import topic_name
from services.common.topology import PROCESSOR_INPUTS


@dataclass(frozen=True)
class ProcessorStatus:
    processor: str
    group: str
    state: str  # Stable, PreparingRebalance, Empty, Dead, ...
    members: int
    lag: int | None  # records on its input topics not yet consumed; None: unknown
    member_names: tuple[str, ...] = ()  # "client_id@host" of each member

    @property
    def ready(self) -> bool:
        return self.state == "Stable" and self.members > 0

    @property
    def settled(self) -> bool:
        """Ready, and everything on its inputs consumed and committed."""
        return self.ready and self.lag == 0


def processor_status(names: list[str], settings: Settings | None = None) -> list[ProcessorStatus]:
    settings = settings or get_settings()
    groups = {name: f"{settings.topic_prefix}{name}" for name in names}
    admin = KafkaAdminClient(**kafka_client_kwargs(settings))
    consumer = KafkaConsumer(**kafka_client_kwargs(settings))
    try:
        try:
            described = admin.describe_groups(list(groups.values()))
        except KafkaError:  # e.g. no coordinator yet on a fresh broker: not ready, not fatal
            described = {}
        out = []
        for name, group in groups.items():
            info = described.get(group) or {}
            state = info.get("group_state") or "Unknown"
            members = info.get("members") or []
            inputs = [topic_name(t, settings) for t in PROCESSOR_INPUTS.get(name, ())]
            lag = _lag(admin, consumer, group, inputs)
            out.append(ProcessorStatus(name, group, state, len(members), lag,
                                       tuple(sorted(_member_name(m) for m in members))))
        return out
    finally:
        consumer.close()
        admin.close()


def _lag(
    admin: KafkaAdminClient, consumer: KafkaConsumer, group: str, topics: list[str]
) -> int | None:
    """Unread records on the inputs; a partition with no commit yet counts whole, since
    processors start from the earliest offset."""
    try:
        committed = admin.list_group_offsets({group: None}).get(group) or {}
    except Exception:  # the group may not exist yet
        committed = {}
    partitions = []
    for topic in topics:
        for p in consumer.partitions_for_topic(topic) or ():
            partitions.append(TopicPartition(topic, p))
    if not partitions:
        return None
    ends = consumer.end_offsets(partitions)
    lag = 0
    for tp in partitions:
        done = committed.get(tp)
        start = done.offset if done is not None and done.offset >= 0 else 0
        lag += max(ends[tp] - start, 0)
    return lag


def _member_name(member: dict) -> str:  # type: ignore[type-arg]
    host = str(member.get("client_host") or "").lstrip("/")
    return f"{member.get('client_id') or member.get('member_id') or '?'}@{host or '?'}"


@dataclass(frozen=True)
class PartitionLeader:
    topic: str
    partition: int
    leader: int | None  # broker id; None: no leader (every replica down)
    in_sync: tuple[int, ...]


def input_leaders(names: list[str], settings: Settings | None = None) -> list[PartitionLeader]:
    """Which broker leads each partition of these processors' inputs, and the in-sync set."""
    settings = settings or get_settings()
    topics = sorted({topic_name(t, settings) for n in names for t in PROCESSOR_INPUTS.get(n, ())})
    admin = KafkaAdminClient(**kafka_client_kwargs(settings))
    try:
        described = admin.describe_topics(topics)
    finally:
        admin.close()
    out = []
    for topic in described:
        for p in topic.get("partitions") or []:
            leader = p.get("leader_id")
            out.append(PartitionLeader(
                topic["name"], p["partition_index"],
                leader if leader is not None and leader >= 0 else None,
                tuple(sorted(p.get("isr_nodes") or ())),
            ))
    return sorted(out, key=lambda x: (x.topic, x.partition))
