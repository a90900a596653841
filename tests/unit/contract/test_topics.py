"""Topic names, partitions and configs: the DESIGN.md table, spelled out once more here."""

from __future__ import annotations

import pytest

from services.contract.processors import TOPIC_SPECS
from services.contract.settings import Settings
from services.contract.topics import (
    EVENT_TOPIC_SPECS,
    Topic,
    partitions_for,
    spec_for,
    topic_configs,
    topic_name,
)

# DESIGN.md, "Topics": name (with the default prefix) and key.
DESIGN_TOPICS = {
    "passk.conversation-finished.v1": "session_id",
    "passk.session-persisted.v1": "session_id",
    "passk.scenarios.v1": "scenario_id",
    "passk.judge-verdicts.v1": "trial_id",
    "passk.gate-results.v1": "trial_id",
    "passk.trial-verdicts.v1": "trial_id",
    "passk.scenario-reliability.v1": "scenario_id",
    "passk.labels.v1": "trial_id",
    "passk.dead-letters.v1": "original key",
}
DESIGN_SPECS = [s for s in TOPIC_SPECS if f"passk.{s.topic.value}" in DESIGN_TOPICS]


def settings(**env: object) -> Settings:
    return Settings(**env)  # type: ignore[arg-type]


@pytest.fixture
def defaults(monkeypatch: pytest.MonkeyPatch) -> Settings:
    for var in ("PASSK_TOPIC_PREFIX", "PASSK_TOPIC_PARTITIONS", "PASSK_TOPIC_RETENTION_MS"):
        monkeypatch.delenv(var, raising=False)
    return settings()


def test_every_design_topic_is_declared_with_its_key(defaults: Settings) -> None:
    declared = {topic_name(s.topic, defaults): s.key for s in TOPIC_SPECS}
    assert DESIGN_TOPICS.items() <= declared.items()
    assert len(DESIGN_SPECS) == len(DESIGN_TOPICS)


def test_each_topic_is_declared_once() -> None:
    assert len({s.topic for s in TOPIC_SPECS}) == len(TOPIC_SPECS)
    assert {s.topic for s in EVENT_TOPIC_SPECS} == set(Topic)


@pytest.mark.parametrize("spec", TOPIC_SPECS, ids=lambda s: s.topic.value)
def test_names_end_in_a_schema_major_version(spec: object) -> None:
    name = spec.topic.value  # type: ignore[attr-defined]
    # Faust names its table changelogs itself; those carry the table's state, not events.
    assert name.endswith(".v1") or name.endswith("-changelog")


def test_a_custom_prefix_is_honoured() -> None:
    custom = settings(PASSK_TOPIC_PREFIX="staging.passk.")
    name = topic_name(Topic.CONVERSATION_FINISHED, custom)
    assert name == "staging.passk.conversation-finished.v1"
    assert all(topic_name(s.topic, custom).startswith("staging.passk.") for s in TOPIC_SPECS)


def test_the_prefix_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PASSK_TOPIC_PREFIX", "ci42.")
    assert topic_name(Topic.LABELS, settings()) == "ci42.labels.v1"


def test_scenarios_are_compacted_on_one_partition(defaults: Settings) -> None:
    spec = spec_for(Topic.SCENARIOS)
    assert topic_configs(spec, defaults) == {"cleanup.policy": "compact"}
    # One ordered log of every scenario version; it is tiny.
    assert partitions_for(spec, defaults) == 1


@pytest.mark.parametrize(
    "spec",
    [s for s in DESIGN_SPECS if s.topic is not Topic.SCENARIOS],
    ids=lambda s: s.topic.value,
)
def test_the_log_keeps_its_records_forever_by_default(spec: object, defaults: Settings) -> None:
    config = topic_configs(spec, defaults)  # type: ignore[arg-type]
    assert config["cleanup.policy"] == "delete"
    assert config["retention.ms"] == "-1"
    assert partitions_for(spec, defaults) == 8  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "topic",
    [
        Topic.CONVERSATION_FINISHED,
        Topic.SESSION_PERSISTED,
        Topic.GATE_RESULTS,
        Topic.JUDGE_VERDICTS,
    ],
)
def test_deadline_inputs_carry_broker_arrival_time(topic: Topic, defaults: Settings) -> None:
    config = topic_configs(spec_for(topic), defaults)
    assert config["message.timestamp.type"] == "LogAppendTime"


def test_retention_and_partitions_are_configurable() -> None:
    custom = settings(PASSK_TOPIC_RETENTION_MS=7 * 24 * 3600 * 1000, PASSK_TOPIC_PARTITIONS=3)
    spec = spec_for(Topic.TRIAL_VERDICTS)
    assert topic_configs(spec, custom)["retention.ms"] == str(7 * 24 * 3600 * 1000)
    assert partitions_for(spec, custom) == 3
    # A topic that fixes its own partition count keeps it.
    assert partitions_for(spec_for(Topic.SCENARIOS), custom) == 1


def test_a_topics_own_config_wins_over_the_default() -> None:
    for spec in TOPIC_SPECS:
        cfg = topic_configs(spec, settings())
        assert spec.config.items() <= cfg.items()
