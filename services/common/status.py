"""How the processors stand: consumer group state, members and lag, read from the broker."""

from __future__ import annotations

from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from services.common.kafka_client import kafka_client_kwargs
from services.common.settings import Settings, get_settings
from services.common.topics import PROCESSOR_INPUTS, topic_name

BROKER_UNREACHABLE = "broker unreachable"
BOOTSTRAP_TIMEOUT_MS = 5_000


@dataclass(frozen=True)
class ProcessorStatus:
    processor: str
    group: str
    state: str  # Stable, PreparingRebalance, Empty, Dead, ...
    members: int
    lag: int | None  # records on its input topics not yet consumed; None: unknown
    # From the worker's health file (services.common.outage): None when it never ran here.
    restarts: int | None = None
    degraded: tuple[str, ...] = ()  # dependencies it cannot reach right now, e.g. "broker"
    member_names: tuple[str, ...] = ()  # "client_id@host" of each member
    # Why its worker is not running (services.common.liveness), None when nothing says so.
    down: str | None = None

    @property
    def health(self) -> str:
        if self.down:
            return f"DOWN: {self.down}"
        if self.degraded:
            return f"degraded: {', '.join(self.degraded)} down"
        return "ok"

    @property
    def ready(self) -> bool:
        return self.state == "Stable" and self.members > 0

    @property
    def settled(self) -> bool:
        """Ready, and everything on its inputs consumed and committed."""
        return self.ready and self.lag == 0


def processor_status(names: list[str], settings: Settings | None = None) -> list[ProcessorStatus]:
    from services.common.liveness import down_reason, supervisor_socket, supervisor_states

    settings = settings or get_settings()
    groups = {name: f"{settings.topic_prefix}{name}" for name in names}
    supervised = supervisor_states(supervisor_socket(settings.data_dir)) or {}
    kwargs = kafka_client_kwargs(settings)
    try:
        admin = KafkaAdminClient(**kwargs, bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS)
        consumer = KafkaConsumer(**kwargs, bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS)
    except KafkaError:
        # The broker is down: the groups are unknown, but what each worker says of
        # itself (alive, degraded, restarted) is still worth showing.
        return [ProcessorStatus(name, group, BROKER_UNREACHABLE, 0, None,
                                *worker_health(name, settings),
                                down=down_reason(supervisor_state=supervised.get(name),
                                                 group_known=False, members=0))
                for name, group in groups.items()]
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
            restarts, degraded = worker_health(name, settings)
            down = down_reason(supervisor_state=supervised.get(name),
                               group_known=bool(described), members=len(members))
            out.append(ProcessorStatus(name, group, state, len(members), lag, restarts, degraded,
                                       tuple(sorted(_member_name(m) for m in members)), down))
        return out
    finally:
        consumer.close()
        admin.close()


def worker_health(name: str, settings: Settings) -> tuple[int | None, tuple[str, ...]]:
    """(restarts, degraded dependencies) from the worker's health file, if it ran here."""
    from services.common.outage import health_path, read_health

    data = read_health(health_path(settings.data_dir, name))
    if data is None:
        return None, ()
    restarts = max(int(data.get("starts", 1)) - 1, 0)
    return restarts, tuple(sorted(data.get("degraded") or {}))


def _lag(
    admin: KafkaAdminClient, consumer: KafkaConsumer, group: str, topics: list[str]
) -> int | None:
    """Unread records on the inputs, all topics together."""
    per_topic = input_offsets(admin, consumer, group, topics)
    if not per_topic:
        return None
    return sum(offsets.lag for offsets in per_topic.values())


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
    except Exception:  # the group may not exist yet
        committed = {}
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
