"""How the processors stand: consumer group state, members and lag, read from the broker."""

from __future__ import annotations

from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaConsumer

from services.common.settings import Settings, get_settings


@dataclass(frozen=True)
class ProcessorStatus:
    processor: str
    group: str
    state: str  # Stable, PreparingRebalance, Empty, Dead, ...
    members: int
    lag: int | None  # records on its input topics not yet committed; None: nothing committed

    @property
    def ready(self) -> bool:
        return self.state == "Stable" and self.members > 0


def processor_status(names: list[str], settings: Settings | None = None) -> list[ProcessorStatus]:
    settings = settings or get_settings()
    groups = {name: f"{settings.topic_prefix}{name}" for name in names}
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    consumer = KafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers)
    try:
        described = admin.describe_groups(list(groups.values()))
        out = []
        for name, group in groups.items():
            info = described.get(group) or {}
            state = info.get("group_state") or "Unknown"
            members = len(info.get("members") or [])
            out.append(ProcessorStatus(name, group, state, members, _lag(admin, consumer, group)))
        return out
    finally:
        consumer.close()
        admin.close()


def _lag(admin: KafkaAdminClient, consumer: KafkaConsumer, group: str) -> int | None:
    try:
        committed = admin.list_group_offsets({group: None}).get(group) or {}
    except Exception:  # the group may not exist yet
        return None
    # Only the processor's inputs: its internal changelog topics are not work to do.
    committed = {tp: om for tp, om in committed.items() if "-changelog" not in tp.topic
                 and "__assignor" not in tp.topic}
    if not committed:
        return None
    ends = consumer.end_offsets(list(committed))
    return sum(max(ends[tp] - om.offset, 0) for tp, om in committed.items() if om.offset >= 0)
