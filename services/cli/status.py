"""How the processors stand: consumer group state, members and lag, read from the broker."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import KafkaError, KafkaTimeoutError, for_code

from services.cli.liveness import (
    down_reason,
    pid_alive,
    stall_reason,
    supervisor_socket,
    supervisor_states,
)
from services.contract.processors import inputs_of
from services.contract.settings import Settings
from services.contract.topics import topic_name
from services.kafka.admin import ask_admin
from services.kafka.kafka_client import kafka_client_kwargs, retrying
from services.kafka.lag import input_offsets
from services.runtime.outage import STALL_AFTER_S, health_path, read_health

BROKER_UNREACHABLE = "broker unreachable"
UNKNOWN = "Unknown"
BOOTSTRAP_TIMEOUT_MS = 5_000


@dataclass(frozen=True)
class ProcessorStatus:
    processor: str
    group: str
    state: str  # Stable, PreparingRebalance, Empty, Dead, ...
    members: int
    lag: int | None  # records on its input topics not yet consumed; None: unknown
    # From the worker's health file (services.runtime.outage): None when it never ran here.
    restarts: int | None = None
    degraded: tuple[str, ...] = ()  # dependencies it cannot reach right now, e.g. "broker"
    member_names: tuple[str, ...] = ()  # "client_id@host" of each member
    # Why its worker is not running (services.cli.liveness), None when nothing says so.
    down: str | None = None
    # Why its worker runs but does nothing (no heartbeat), None when nothing says so.
    stalled: str | None = None

    @property
    def health(self) -> str:
        if self.down:
            return f"DOWN: {self.down}"
        if self.stalled:
            return f"stalled: {self.stalled}"
        if self.degraded:
            return f"degraded: {', '.join(self.degraded)} down"
        # Not down by any rule yet (a worker still joining, a rebalance, a stopped worker
        # inside its grace), but never "ok": an operator reads this column alone.
        if self.members == 0:
            return "not ready: no member in its group"
        if self.state != "Stable":
            return f"not ready: group {self.state}"
        return "ok"

    @property
    def healthy(self) -> bool:
        """Ready, and nothing says otherwise: what `passk status` exits 0 on."""
        return self.ready and not (self.down or self.stalled or self.degraded)

    @property
    def ready(self) -> bool:
        return self.state == "Stable" and self.members > 0

    @property
    def settled(self) -> bool:
        """Ready, and everything on its inputs consumed and committed."""
        return self.ready and self.lag == 0


def processor_status(names: list[str], settings: Settings) -> list[ProcessorStatus]:
    groups = {name: f"{settings.topic_prefix}{name}" for name in names}
    supervised = supervisor_states(supervisor_socket(settings.data_dir)) or {}

    healths = {name: worker_health(name, settings) for name in names}

    def unknown(state: str) -> list[ProcessorStatus]:
        # The groups are unknown, but what each worker says of itself (alive, degraded,
        # restarted, stalled) is still worth showing.
        return [
            ProcessorStatus(
                name,
                group,
                state,
                0,
                None,
                healths[name].restarts,
                healths[name].degraded,
                down=down_reason(
                    supervisor_state=supervised.get(name), group_known=False, members=0
                ),
                stalled=healths[name].stalled,
            )
            for name, group in groups.items()
        ]

    try:
        # Each try with fresh clients: right after a broker is lost, a call can be sent to
        # it (see kafka_client.retrying), and a group's coordinator moves to a live broker.
        described, lags = retrying(lambda: _groups_and_lags(groups, settings))
    except KafkaTimeoutError:
        return unknown(BROKER_UNREACHABLE)  # the broker is down
    except KafkaError as exc:
        # Still failing after the cluster had time to settle: say so, never guess.
        return unknown(f"{UNKNOWN} ({type(exc).__name__})")
    out = []
    for name, group in groups.items():
        info = described.get(group) or {}
        state = info.get("group_state") or UNKNOWN
        members = info.get("members") or []
        seen = healths[name]
        down = down_reason(
            supervisor_state=supervised.get(name),
            group_known=bool(described),
            members=len(members),
            up_s=seen.up_s,
        )
        out.append(
            ProcessorStatus(
                name,
                group,
                state,
                len(members),
                lags[name],
                seen.restarts,
                seen.degraded,
                tuple(sorted(_member_name(m) for m in members)),
                down,
                seen.stalled,
            )
        )
    return out


def _groups_and_lags(
    groups: dict[str, str], settings: Settings
) -> tuple[dict[str, dict], dict[str, int | None]]:  # type: ignore[type-arg]
    """Each group's description and lag, in one go with one pair of clients."""
    kwargs = kafka_client_kwargs(settings)
    admin = KafkaAdminClient(**kwargs, bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS)
    try:
        consumer = KafkaConsumer(**kwargs, bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS)
    except BaseException:
        admin.close()
        raise
    try:
        try:
            described = admin.describe_groups(list(groups.values()))
        except KafkaError as exc:
            if getattr(exc, "retriable", False):
                raise  # a coordinator moving, a broker just lost: try again
            described = {}
        for info in described.values():
            _raise_if_moving(info)
        lags = {
            name: _lag(admin, consumer, group, [topic_name(t, settings) for t in inputs_of(name)])
            for name, group in groups.items()
        }
        return described, lags
    finally:
        consumer.close()
        admin.close()


def _raise_if_moving(group: dict) -> None:  # type: ignore[type-arg]
    """kafka-python returns a group's own error in its description instead of raising it
    (no state, no members): a coordinator moving after a broker loss (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS) would read as a group with no members. Raise those."""
    found = re.match(r"\[Error (\d+)\]", str(group.get("error") or ""))
    if found:
        error = for_code(int(found.group(1)))
        if error.retriable:
            raise error(group["error"])


@dataclass(frozen=True)
class WorkerHealth:
    restarts: int | None = None
    degraded: tuple[str, ...] = ()
    stalled: str | None = None
    up_s: float | None = None  # since its start


def worker_health(name: str, settings: Settings, now: float | None = None) -> WorkerHealth:
    """What the worker's health file says, if it ran here: restarts, degraded dependencies,
    and whether its live process has stopped writing its heartbeat."""
    data = read_health(health_path(settings.data_dir, name))
    if data is None:
        return WorkerHealth()
    now = time.time() if now is None else now
    restarts = max(int(data.get("starts", 1)) - 1, 0)
    try:
        up_s: float | None = now - datetime.fromisoformat(str(data["started_at"])).timestamp()
    except (KeyError, ValueError):
        up_s = None
    # beat_at is written from the first heartbeat on: a worker still starting has none.
    return WorkerHealth(
        restarts,
        tuple(sorted(data.get("degraded") or {})),
        stall_reason(data, now, STALL_AFTER_S, pid_alive),
        up_s,
    )


def _lag(
    admin: KafkaAdminClient, consumer: KafkaConsumer, group: str, topics: list[str]
) -> int | None:
    """Unread records on the inputs, all topics together."""
    per_topic = input_offsets(admin, consumer, group, topics)
    if not per_topic:
        return None
    return sum(offsets.lag for offsets in per_topic.values())


def _member_name(member: dict) -> str:  # type: ignore[type-arg]
    host = str(member.get("client_host") or "").lstrip("/")
    return f"{member.get('client_id') or member.get('member_id') or '?'}@{host or '?'}"


@dataclass(frozen=True)
class PartitionLeader:
    topic: str
    partition: int
    leader: int | None  # broker id; None: no leader (every replica down)
    in_sync: tuple[int, ...]


def input_leaders(names: list[str], settings: Settings) -> list[PartitionLeader]:
    """Which broker leads each partition of these processors' inputs, and the in-sync set."""
    topics = sorted({topic_name(t, settings) for n in names for t in inputs_of(n)})

    described = ask_admin(settings, lambda admin: admin.describe_topics(topics))
    out = []
    for topic in described:
        for p in topic.get("partitions") or []:
            leader = p.get("leader_id")
            out.append(
                PartitionLeader(
                    topic["name"],
                    p["partition_index"],
                    leader if leader is not None and leader >= 0 else None,
                    tuple(sorted(p.get("isr_nodes") or ())),
                )
            )
    return sorted(out, key=lambda x: (x.topic, x.partition))


@dataclass(frozen=True)
class StatusReport:
    """What `passk status` shows: each processor, its inputs' leaders, dead letters per
    reason (None: the topic could not be read)."""

    statuses: list[ProcessorStatus]
    leaders: list[PartitionLeader]
    letters: dict[str, int] | None

    @property
    def healthy(self) -> bool:
        return all(s.healthy for s in self.statuses)


def status_report(names: list[str], settings: Settings, wait: float | None) -> StatusReport:
    """Each processor's status, asked again each second for at most `wait` seconds until
    every one is healthy (the broker first reached within `wait`)."""
    from services.kafka.reach import require_broker

    deadline = time.monotonic() + (wait or 0)
    require_broker(wait, settings)
    while True:
        statuses = processor_status(names, settings)
        if all(s.healthy for s in statuses) or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    letters = _dead_letter_counts(settings)
    return StatusReport(statuses, input_leaders(names, settings), letters)


def _dead_letter_counts(settings: Settings) -> dict[str, int] | None:
    """Dead letters per reason since the topic began (refused inputs and traces not taken);
    None when the topic cannot be read within a few seconds."""
    from services.contract.exits import CliError
    from services.report.dead_letters import read_topic, select

    try:
        listing = select(read_topic(settings, timeout=10.0), since=None, reason=None, limit=1)
    except (CliError, KafkaError, OSError):
        return None
    return dict(sorted(listing.counts.items()))
