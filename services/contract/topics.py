"""Every topic passk uses, declared once. Nothing else spells a topic name."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from services.contract.settings import Settings, get_settings


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
    # Internal: the changelogs of the processors' Faust tables, named as Faust names them
    # ("<app id>-<table>-changelog"). Created up front, because a worker whose changelog
    # topic is not yet in the broker's metadata when its first event arrives crashes.
    GATE_JOINS_CHANGELOG = "gate-gate-joins-changelog"
    VERDICT_TRIALS_CHANGELOG = "verdict-verdict-trials-changelog"
    AGGREGATE_STATE_CHANGELOG = "aggregate-aggregate-state-changelog"
    CALIBRATION_JOINS_CHANGELOG = "calibration-calibration-joins-changelog"
    CALIBRATION_MATRICES_CHANGELOG = "calibration-calibration-matrices-changelog"
    # The gate's and verdict's memory of graded trials (RocksDB tables, services.runtime.graded)
    GATE_GRADED_CHANGELOG = "gate-gate-graded-changelog"
    VERDICT_GRADED_CHANGELOG = "verdict-verdict-graded-changelog"


@dataclass(frozen=True)
class TopicSpec:
    topic: Topic
    key: str
    compacted: bool = False
    partitions: int | None = None  # None: settings.topic_partitions
    config: dict[str, str] = field(default_factory=dict)
    # compacted, and also deleted past PASSK_DEDUP_RETENTION_S (a memory of graded trials)
    dedup_retained: bool = False


# Deadlines are measured on broker time (see services.runtime.ticks.StreamClock): the broker
# stamps these records on arrival, whatever time the producer claims.
ARRIVAL_TIME = {"message.timestamp.type": "LogAppendTime"}

TOPIC_SPECS: tuple[TopicSpec, ...] = (
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
    TopicSpec(Topic.GATE_JOINS_CHANGELOG, key="session_id", compacted=True),
    TopicSpec(Topic.VERDICT_TRIALS_CHANGELOG, key="trial_id", compacted=True),
    TopicSpec(Topic.AGGREGATE_STATE_CHANGELOG, key="aggregate state key", compacted=True),
    TopicSpec(Topic.CALIBRATION_JOINS_CHANGELOG, key="trial_id", compacted=True),
    TopicSpec(Topic.CALIBRATION_MATRICES_CHANGELOG, key="judge_id", compacted=True),
    TopicSpec(Topic.GATE_GRADED_CHANGELOG, key="session_id", dedup_retained=True),
    TopicSpec(Topic.VERDICT_GRADED_CHANGELOG, key="trial_id", dedup_retained=True),
)


# What each processor consumes, declared once: the apps subscribe to these (plus their
# own tick topic), and `passk status` counts its lag on them.
PROCESSOR_INPUTS: dict[str, tuple[Topic, ...]] = {
    "gate": (Topic.CONVERSATION_FINISHED, Topic.SESSION_PERSISTED, Topic.REGRADE_REQUESTS),
    "verdict": (Topic.GATE_RESULTS, Topic.JUDGE_VERDICTS),
    "judge": (Topic.CONVERSATION_FINISHED, Topic.REGRADE_REQUESTS, Topic.JUDGE_REQUESTS),
    "sink": (Topic.CONVERSATION_FINISHED, Topic.GATE_RESULTS, Topic.JUDGE_VERDICTS,
             Topic.TRIAL_VERDICTS, Topic.SCENARIO_RELIABILITY),
    "aggregate": (Topic.TRIAL_VERDICTS, Topic.AGGREGATE_BY_SCENARIO),
    "calibration": (Topic.LABELS, Topic.JUDGE_VERDICTS, Topic.LABELLED_VERDICTS,
                    Topic.JUDGE_CALIBRATIONS),
    # the evaluation exporter (services/otlp/export.py): trace ids, then every result
    "otlp": (Topic.CONVERSATION_FINISHED, Topic.JUDGE_VERDICTS, Topic.GATE_RESULTS,
             Topic.TRIAL_VERDICTS),
}


def topic_name(topic: Topic, settings: Settings | None = None) -> str:
    return f"{(settings or get_settings()).topic_prefix}{topic.value}"


def spec_for(topic: Topic) -> TopicSpec:
    return next(s for s in TOPIC_SPECS if s.topic is topic)


def partitions_for(spec: TopicSpec, settings: Settings | None = None) -> int:
    return spec.partitions or (settings or get_settings()).topic_partitions


def topic_configs(spec: TopicSpec, settings: Settings | None = None) -> dict[str, str]:
    settings = settings or get_settings()
    if spec.dedup_retained:
        cfg = dedup_retained_config(settings)
    elif spec.compacted:
        cfg = {"cleanup.policy": "compact"}
    else:
        cfg = {"cleanup.policy": "delete", "retention.ms": str(settings.topic_retention_ms)}
    return {**cfg, **spec.config}


def dedup_retained_config(settings: Settings) -> dict[str, str]:
    """A memory of graded trials: the newest marker per key, none older than the retention."""
    return {"cleanup.policy": "compact,delete",
            "retention.ms": str(max(1, int(settings.dedup_retention_s * 1000)))}
