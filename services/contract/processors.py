"""The processors `passk` runs, declared once: what each consumes (agent by agent), writes
and reads back, which of its topics are joined by key, its Faust tables and its /metrics
port. The CLI (`passk worker`, `passk supervise`, `passk status`), the monitoring config,
the consumer-lag monitor, the secured broker's ACLs, topic creation and every app's topic
and table declarations read this registry; tests/integration/test_apps_match_registry.py
builds every app and checks its real topics and tables against it.

A table's changelog topic is not written anywhere: it is derived here from the table's
name exactly as Faust derives it, and created up front with the other topics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from services.contract.topics import EVENT_TOPIC_SPECS, Changelog, Topic, TopicRef, TopicSpec


class Kind(StrEnum):
    # A Faust app in its own consumer group: `passk worker NAME` runs
    # services/NAME/app.py's `build(settings).main()`, the app built from those settings.
    STREAM = "stream processor"
    # Not a Faust app (services/NAME/app.py's `build(settings)` returns an object with a
    # `.main()` too): supervised and scraped like the workers, but no agents and no tables.
    SERVER = "server"


@dataclass(frozen=True)
class TableSpec:
    name: str  # the Faust table name, as given to app.Table
    key: str  # what its keys are (as TopicSpec.key): the key of its changelog
    # The memory of graded trials (services.runtime.graded): RocksDB, and a changelog that
    # is compacted and also deleted past PASSK_DEDUP_RETENTION_S. Otherwise: in memory,
    # changelog compacted.
    on_disk: bool = False


def _unique(topics: tuple[TopicRef, ...]) -> tuple[TopicRef, ...]:
    return tuple(dict.fromkeys(topics))


@dataclass(frozen=True)
class ProcessorSpec:
    name: str
    kind: Kind
    # /metrics on PASSK_METRICS_PORT_BASE + this: explicit, so reordering the registry
    # never moves a Prometheus target.
    metrics_offset: int
    # A stream processor's agents, by function name, and the topics each subscribes to
    # (its tick topic included where it reads it). Its inputs are derived from them.
    agents: Mapping[str, tuple[Topic, ...]] = field(default_factory=dict, hash=False)
    # What it consumes (what `passk status` counts lag on, besides its own ticks): derived
    # from the agents for a stream processor, given for a server.
    inputs: tuple[Topic, ...] = ()
    # What it writes, besides its tick topic and its tables' changelogs (derived).
    outputs: tuple[Topic, ...] = ()
    # What it reads besides its inputs, its ticks and its changelogs (the scenario
    # catalog, the calibrations it gates on).
    read_backs: tuple[TopicRef, ...] = ()
    # Inputs one agent joins by key: a key must land on the same partition number in each,
    # and in the tick topic and the tables' changelogs the join writes with it.
    joined: tuple[Topic, ...] = ()
    tables: tuple[TableSpec, ...] = ()
    # The topic its deadline timer writes to and its join agent reads, in stream order
    # on the key's partition (services.runtime.ticks).
    tick: Topic | None = None

    def __post_init__(self) -> None:
        if self.kind is Kind.STREAM:
            if not self.agents or self.inputs:
                raise ValueError(
                    f"{self.name}: a stream processor declares its agents' "
                    "topics, and its inputs follow from them"
                )
            subscribed = _unique(tuple(t for ts in self.agents.values() for t in ts))
            object.__setattr__(self, "inputs", tuple(t for t in subscribed if t != self.tick))
            if self.tick is not None and self.tick not in subscribed:
                raise ValueError(f"{self.name}: no agent reads its tick topic {self.tick}")
        elif self.agents or self.tables or self.tick or self.joined:
            raise ValueError(f"{self.name}: a server has no agents, tables, ticks or joins")
        if stray := set(self.joined) - set(self.inputs):
            raise ValueError(f"{self.name}: joins topics it does not read: {sorted(stray)}")

    @property
    def module(self) -> str:
        """The module whose `build(settings)` `passk worker NAME` runs."""
        return f"services.{self.name}.app"

    @property
    def changelogs(self) -> tuple[Changelog, ...]:
        return tuple(Changelog(self.name, t.name) for t in self.tables)

    @property
    def own(self) -> tuple[TopicRef, ...]:
        """The topics it both writes and reads back: its ticks and its changelogs."""
        return ((self.tick,) if self.tick else ()) + self.changelogs

    @property
    def reads(self) -> tuple[TopicRef, ...]:
        return _unique(self.inputs + self.read_backs + self.own)

    @property
    def writes(self) -> tuple[TopicRef, ...]:
        return _unique(self.outputs + self.own)

    @property
    def co_partitioned(self) -> tuple[TopicRef, ...]:
        """Topics whose partition counts must be equal for this processor to run: its joined
        inputs and what the join writes with them (a table's changelog partition is the
        partition of the record being handled)."""
        return _unique(self.joined + self.own) if self.joined else ()

    def metrics_port(self, base: int) -> int:
        return base + self.metrics_offset

    def changelog_specs(self) -> tuple[TopicSpec, ...]:
        return tuple(
            TopicSpec(
                Changelog(self.name, t.name),
                key=t.key,
                compacted=not t.on_disk,
                dedup_retained=t.on_disk,
            )
            for t in self.tables
        )


_REGISTRY: tuple[ProcessorSpec, ...] = (
    ProcessorSpec(
        "gate",
        Kind.STREAM,
        metrics_offset=0,
        agents={
            "join": (
                Topic.CONVERSATION_FINISHED,
                Topic.SESSION_PERSISTED,
                Topic.REGRADE_REQUESTS,
                Topic.GATE_TICKS,
            )
        },
        tick=Topic.GATE_TICKS,
        joined=(Topic.CONVERSATION_FINISHED, Topic.SESSION_PERSISTED),
        outputs=(Topic.GATE_RESULTS, Topic.JUDGE_REQUESTS, Topic.DEAD_LETTERS),
        read_backs=(Topic.SCENARIOS,),
        # session_id -> the trial's join while it is pending; then its graded marker
        tables=(
            TableSpec("gate-joins", key="session_id"),
            TableSpec("gate-graded", key="session_id", on_disk=True),
        ),
    ),
    ProcessorSpec(
        "verdict",
        Kind.STREAM,
        metrics_offset=1,
        agents={"collect": (Topic.GATE_RESULTS, Topic.JUDGE_VERDICTS, Topic.VERDICT_TICKS)},
        tick=Topic.VERDICT_TICKS,
        joined=(Topic.GATE_RESULTS, Topic.JUDGE_VERDICTS),
        outputs=(Topic.TRIAL_VERDICTS, Topic.DEAD_LETTERS),
        read_backs=(Topic.SCENARIOS, Topic.JUDGE_CALIBRATIONS),
        tables=(
            TableSpec("verdict-trials", key="trial_id"),
            TableSpec("verdict-graded", key="trial_id", on_disk=True),
        ),
    ),
    ProcessorSpec(
        "judge",
        Kind.STREAM,
        metrics_offset=2,
        agents={
            "judge_trials": (Topic.CONVERSATION_FINISHED,),
            "regrade_trials": (Topic.REGRADE_REQUESTS,),
            "judge_after_gates": (Topic.JUDGE_REQUESTS,),
        },
        outputs=(Topic.JUDGE_VERDICTS, Topic.DEAD_LETTERS),
        read_backs=(Topic.SCENARIOS,),
    ),
    ProcessorSpec(
        "sink",
        Kind.STREAM,
        metrics_offset=3,
        agents={
            "sink": (
                Topic.CONVERSATION_FINISHED,
                Topic.GATE_RESULTS,
                Topic.JUDGE_VERDICTS,
                Topic.TRIAL_VERDICTS,
                Topic.SCENARIO_RELIABILITY,
            )
        },
        outputs=(Topic.DEAD_LETTERS,),
        read_backs=(Topic.SCENARIOS,),
    ),
    ProcessorSpec(
        "aggregate",
        Kind.STREAM,
        metrics_offset=4,
        # trial verdicts re-keyed by scenario onto its own topic, then counted there
        agents={"rekey": (Topic.TRIAL_VERDICTS,), "count": (Topic.AGGREGATE_BY_SCENARIO,)},
        joined=(Topic.AGGREGATE_BY_SCENARIO,),
        outputs=(Topic.AGGREGATE_BY_SCENARIO, Topic.SCENARIO_RELIABILITY, Topic.DEAD_LETTERS),
        read_backs=(Topic.SCENARIOS,),
        tables=(TableSpec("aggregate-state", key="aggregate state key"),),
    ),
    ProcessorSpec(
        "calibration",
        Kind.STREAM,
        metrics_offset=5,
        # labels joined with verdicts by trial, re-keyed by judge, then folded per judge
        agents={
            "join": (Topic.LABELS, Topic.JUDGE_VERDICTS),
            "fold": (Topic.LABELLED_VERDICTS, Topic.JUDGE_CALIBRATIONS),
        },
        joined=(
            Topic.LABELS,
            Topic.JUDGE_VERDICTS,
            Topic.LABELLED_VERDICTS,
            Topic.JUDGE_CALIBRATIONS,
        ),
        outputs=(Topic.LABELLED_VERDICTS, Topic.JUDGE_CALIBRATIONS, Topic.DEAD_LETTERS),
        read_backs=(Topic.SCENARIOS,),
        tables=(
            TableSpec("calibration-joins", key="trial_id"),
            TableSpec("calibration-matrices", key="judge_id"),
        ),
    ),
    ProcessorSpec(
        # the OTLP receiver (publishes the trials it maps), and the evaluation exporter
        # (services/otlp/export.py): trace ids, then every result
        "otlp",
        Kind.SERVER,
        metrics_offset=6,
        inputs=(
            Topic.CONVERSATION_FINISHED,
            Topic.JUDGE_VERDICTS,
            Topic.GATE_RESULTS,
            Topic.TRIAL_VERDICTS,
        ),
        outputs=(Topic.CONVERSATION_FINISHED, Topic.SESSION_PERSISTED),
    ),
    ProcessorSpec(
        # the continuous auditor (services/audit/app.py): `passk audit --since` every
        # interval, from the start of each topic's period, in no consumer group; it
        # consumes nothing and writes nothing
        "audit",
        Kind.SERVER,
        metrics_offset=7,
        read_backs=(
            Topic.CONVERSATION_FINISHED,
            Topic.GATE_RESULTS,
            Topic.JUDGE_VERDICTS,
            Topic.TRIAL_VERDICTS,
            Topic.DEAD_LETTERS,
            Topic.SCENARIOS,
            Changelog("aggregate", "aggregate-state"),
        ),
    ),
)


def _index(specs: tuple[ProcessorSpec, ...]) -> dict[str, ProcessorSpec]:
    offsets = [s.metrics_offset for s in specs]
    if len(set(offsets)) != len(offsets):
        raise ValueError(f"two processors share a metrics port offset: {offsets}")
    return {s.name: s for s in specs}


PROCESSORS: dict[str, ProcessorSpec] = _index(_REGISTRY)

# Stream processors runnable with `passk worker NAME`, and the servers supervised beside them.
WORKERS: tuple[str, ...] = tuple(n for n, s in PROCESSORS.items() if s.kind is Kind.STREAM)
SERVERS: tuple[str, ...] = tuple(n for n, s in PROCESSORS.items() if s.kind is Kind.SERVER)

# Every topic passk creates: the event topics, then every table's changelog. Created up
# front, because a worker whose changelog topic is not yet in the broker's metadata when
# its first event arrives crashes.
TOPIC_SPECS: tuple[TopicSpec, ...] = EVENT_TOPIC_SPECS + tuple(
    c for s in PROCESSORS.values() for c in s.changelog_specs()
)


def inputs_of(processor: str) -> tuple[Topic, ...]:
    """What a processor consumes; nothing for a name that is not one (`passk status
    --processors` shows such a group without lag)."""
    spec = PROCESSORS.get(processor)
    return spec.inputs if spec else ()


def metrics_ports(names: Iterable[str], base: int) -> dict[str, int]:
    """Each processor's /metrics port."""
    return {n: PROCESSORS[n].metrics_port(base) for n in names}


def co_partitioning_problem(processor: str, counts: Mapping[TopicRef, int | None]) -> str | None:
    """Why `processor` must not run on topics with these partition counts (None: it may)."""
    spec = PROCESSORS.get(processor)
    topics = spec.co_partitioned if spec else ()
    missing = [t.value for t in topics if not counts.get(t)]
    if missing:
        return f"{processor}: input topic(s) missing: {', '.join(missing)}"
    distinct = {counts[t] for t in topics}
    if len(distinct) <= 1:
        return None
    listed = ", ".join(f"{t.value}={counts[t]}" for t in topics)
    return (
        f"{processor} joins its inputs by key, so they must have equal partition counts; "
        f"found {listed}. Recreate them with one count (PASSK_TOPIC_PARTITIONS) or add "
        "partitions to the smaller ones before starting the worker."
    )
