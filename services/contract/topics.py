"""Every event topic passk uses, declared once: nothing else spells a topic name. The
tables' changelog topics are derived from the processor registry
(services.contract.processors), which adds them to what `passk topics create` makes."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from services.contract.settings import Settings


class Topic(StrEnum):
    CONVERSATION_FINISHED = "conversation-finished.v1"
    SESSION_PERSISTED = "session-persisted.v1"
    SCENARIOS = "scenarios.v1"
    JUDGE_VERDICTS = "judge-verdicts.v1"
    GATE_RESULTS = "gate-results.v1"
    TRIAL_VERDICTS = "trial-verdicts.v1"
    SCENARIO_RELIABILITY = "scenario-reliability.v1"
    LABELS = "labels.v1"
    JUDGE_CALIBRATIONS = "judge-calibrations.v1"
    DEAD_LETTERS = "dead-letters.v1"
    # `passk regrade` asks the gate and the judge to grade a trial again (RegradeRequest).
    REGRADE_REQUESTS = "regrade-requests.v1"
    # Internal: the gate asks the judge to grade a trial of a skip_when_gates_fail scenario
    # once its gates are decided (JudgeRequest, the conversation inside).
    JUDGE_REQUESTS = "judge-requests.v1"
    # Internal: a processor's timer asks its own agent, in stream order and on the key's
    # partition, to re-examine a key whose deadline has passed (table writes need that).
    GATE_TICKS = "gate-ticks.v1"
    VERDICT_TICKS = "verdict-ticks.v1"
    # Internal: trial verdicts re-keyed by scenario, so one partition holds a scenario's
    # every trial and its windows are counted in one place, in one order.
    AGGREGATE_BY_SCENARIO = "aggregate-by-scenario.v1"
    # Internal: a label joined with its judge verdict, re-keyed by judge id so one agent
    # owns each judge's running matrix.
    LABELLED_VERDICTS = "labelled-verdicts.v1"


@dataclass(frozen=True)
class Changelog:
    """A Faust table's changelog topic, named as Faust names it: "<app id>-<table>-changelog"
    (faust.tables.base.Collection._changelog_topic_name), where the app id is the topic
    prefix and the processor's name (services.runtime.app.make_app). The tables are
    declared in services.contract.processors; their changelogs are never spelled by hand."""

    processor: str
    table: str

    @property
    def value(self) -> str:
        return f"{self.processor}-{self.table}-changelog"

    def __str__(self) -> str:
        return self.value


# A topic passk creates: an event topic, or a table's changelog.
TopicRef = Topic | Changelog


@dataclass(frozen=True)
class TopicSpec:
    topic: TopicRef
    key: str
    compacted: bool = False
    partitions: int | None = None  # None: settings.topic_partitions
    config: dict[str, str] = field(default_factory=dict)
    # compacted, and also deleted past PASSK_DEDUP_RETENTION_S (a memory of graded trials)
    dedup_retained: bool = False


# Deadlines are measured on broker time (see services.runtime.ticks.StreamClock): the broker
# stamps these records on arrival, whatever time the producer claims.
ARRIVAL_TIME = {"message.timestamp.type": "LogAppendTime"}

# The event topics; services.contract.processors.TOPIC_SPECS adds the tables' changelogs.
EVENT_TOPIC_SPECS: tuple[TopicSpec, ...] = (
    TopicSpec(Topic.CONVERSATION_FINISHED, key="session_id", config=ARRIVAL_TIME),
    TopicSpec(Topic.SESSION_PERSISTED, key="session_id", config=ARRIVAL_TIME),
    # One partition keeps every scenario version in one ordered log; it is tiny.
    TopicSpec(Topic.SCENARIOS, key="scenario_id", compacted=True, partitions=1),
    TopicSpec(Topic.JUDGE_VERDICTS, key="trial_id", config=ARRIVAL_TIME),
    TopicSpec(Topic.GATE_RESULTS, key="trial_id", config=ARRIVAL_TIME),
    TopicSpec(Topic.TRIAL_VERDICTS, key="trial_id"),
    TopicSpec(Topic.SCENARIO_RELIABILITY, key="scenario_id"),
    TopicSpec(Topic.LABELS, key="trial_id"),
    TopicSpec(Topic.JUDGE_CALIBRATIONS, key="judge_id"),
    TopicSpec(Topic.LABELLED_VERDICTS, key="judge_id"),
    TopicSpec(Topic.DEAD_LETTERS, key="original key"),
    TopicSpec(Topic.REGRADE_REQUESTS, key="trial_id"),
    TopicSpec(Topic.JUDGE_REQUESTS, key="trial_id"),
    TopicSpec(Topic.GATE_TICKS, key="session_id", config={"retention.ms": str(24 * 3600 * 1000)}),
    TopicSpec(Topic.VERDICT_TICKS, key="trial_id", config={"retention.ms": str(24 * 3600 * 1000)}),
    TopicSpec(Topic.AGGREGATE_BY_SCENARIO, key="scenario_id"),
)


def topic_name(topic: TopicRef, settings: Settings) -> str:
    return f"{settings.topic_prefix}{topic.value}"


def spec_for(topic: Topic) -> TopicSpec:
    return next(s for s in EVENT_TOPIC_SPECS if s.topic is topic)


def partitions_for(spec: TopicSpec, settings: Settings) -> int:
    return spec.partitions or settings.topic_partitions


def topic_configs(spec: TopicSpec, settings: Settings) -> dict[str, str]:
    if spec.dedup_retained:
        cfg = dedup_retained_config(settings)
    elif spec.compacted:
        cfg = {"cleanup.policy": "compact"}
    else:
        cfg = {"cleanup.policy": "delete", "retention.ms": str(settings.topic_retention_ms)}
    return {**cfg, **spec.config}


def dedup_retained_config(settings: Settings) -> dict[str, str]:
    """A memory of graded trials: the newest marker per key, none older than the retention."""
    return {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(max(1, int(settings.dedup_retention_s * 1000))),
    }
