"""The processor registry: the names, ports and topic sets derived from it are the ones
passk has always used (a Prometheus target, a changelog, an ACL that moved would strand
what was there), and the co-partitioning rule read from it."""

from __future__ import annotations

import pytest

from services.contract.processors import (
    PROCESSORS,
    SERVERS,
    TOPIC_SPECS,
    WORKERS,
    Kind,
    ProcessorSpec,
    TableSpec,
    co_partitioning_problem,
    inputs_of,
    metrics_ports,
)
from services.contract.settings import Settings
from services.contract.topics import Changelog, Topic, TopicRef, topic_configs, topic_name


def test_workers_and_servers_in_their_order() -> None:
    assert WORKERS == ("gate", "verdict", "judge", "sink", "aggregate", "calibration")
    assert SERVERS == ("otlp", "audit")
    assert all(PROCESSORS[n].module == f"services.{n}.app" for n in WORKERS + SERVERS)


def test_metrics_ports_are_the_ones_prometheus_has_always_scraped() -> None:
    assert metrics_ports(tuple(PROCESSORS), 9464) == {
        "gate": 9464,
        "verdict": 9465,
        "judge": 9466,
        "sink": 9467,
        "aggregate": 9468,
        "calibration": 9469,
        "otlp": 9470,
        "audit": 9471,
    }


def test_a_port_does_not_follow_the_order_asked_in() -> None:
    assert metrics_ports(["otlp", "gate"], 100) == {"otlp": 106, "gate": 100}


def test_changelog_names_are_faust_s_and_the_ones_created_so_far() -> None:
    prefixed = Settings(PASSK_TOPIC_PREFIX="staging.")  # type: ignore[call-arg]
    names = {topic_name(c, prefixed) for s in PROCESSORS.values() for c in s.changelogs}
    assert names == {
        "staging.gate-gate-joins-changelog",
        "staging.gate-gate-graded-changelog",
        "staging.verdict-verdict-trials-changelog",
        "staging.verdict-verdict-graded-changelog",
        "staging.aggregate-aggregate-state-changelog",
        "staging.calibration-calibration-joins-changelog",
        "staging.calibration-calibration-matrices-changelog",
    }
    assert str(Changelog("gate", "gate-joins")) == "gate-gate-joins-changelog"


def test_changelogs_are_created_with_their_table_s_retention() -> None:
    settings = Settings(PASSK_DEDUP_RETENTION_S=3600)  # type: ignore[call-arg]
    configs = {
        s.topic.value: topic_configs(s, settings)
        for s in TOPIC_SPECS
        if isinstance(s.topic, Changelog)
    }
    assert len(configs) == 7
    for name, cfg in configs.items():
        if name.endswith("-graded-changelog"):  # the memory of graded trials, on disk
            assert cfg == {"cleanup.policy": "compact,delete", "retention.ms": "3600000"}
        else:
            assert cfg == {"cleanup.policy": "compact"}, name


def test_every_topic_is_created_once() -> None:
    topics = [s.topic for s in TOPIC_SPECS]
    assert len(set(topics)) == len(topics)
    assert set(Topic) <= set(topics)


def test_inputs_follow_from_the_agents_without_the_tick_topic() -> None:
    gate = PROCESSORS["gate"]
    assert gate.inputs == (
        Topic.CONVERSATION_FINISHED,
        Topic.SESSION_PERSISTED,
        Topic.REGRADE_REQUESTS,
    )
    assert PROCESSORS["judge"].inputs == (
        Topic.CONVERSATION_FINISHED,
        Topic.REGRADE_REQUESTS,
        Topic.JUDGE_REQUESTS,
    )
    assert inputs_of("otlp") == (
        Topic.CONVERSATION_FINISHED,
        Topic.JUDGE_VERDICTS,
        Topic.GATE_RESULTS,
        Topic.TRIAL_VERDICTS,
    )
    assert inputs_of("no-such-processor") == ()


def test_a_processor_reads_and_writes_its_ticks_and_changelogs() -> None:
    gate = PROCESSORS["gate"]
    own = {Topic.GATE_TICKS, Changelog("gate", "gate-joins"), Changelog("gate", "gate-graded")}
    assert own <= set(gate.reads) and own <= set(gate.writes)
    assert set(gate.reads) - own == {
        Topic.CONVERSATION_FINISHED,
        Topic.SESSION_PERSISTED,
        Topic.REGRADE_REQUESTS,
        Topic.SCENARIOS,
    }
    assert set(gate.writes) - own == {Topic.GATE_RESULTS, Topic.JUDGE_REQUESTS, Topic.DEAD_LETTERS}
    assert PROCESSORS["judge"].writes == (Topic.JUDGE_VERDICTS, Topic.DEAD_LETTERS)


def test_co_partitioned_topics_are_the_join_and_what_it_writes() -> None:
    assert set(PROCESSORS["verdict"].co_partitioned) == {
        Topic.GATE_RESULTS,
        Topic.JUDGE_VERDICTS,
        Topic.VERDICT_TICKS,
        Changelog("verdict", "verdict-trials"),
        Changelog("verdict", "verdict-graded"),
    }
    assert set(PROCESSORS["aggregate"].co_partitioned) == {
        Topic.AGGREGATE_BY_SCENARIO,
        Changelog("aggregate", "aggregate-state"),
    }
    assert PROCESSORS["judge"].co_partitioned == () == PROCESSORS["sink"].co_partitioned


def test_equal_counts_may_run() -> None:
    gate = PROCESSORS["gate"].co_partitioned
    assert co_partitioning_problem("gate", dict.fromkeys(gate, 8)) is None


def test_one_topic_with_other_count_is_refused_naming_every_count() -> None:
    counts = dict.fromkeys(PROCESSORS["verdict"].co_partitioned, 8)
    counts[Topic.JUDGE_VERDICTS] = 4
    problem = co_partitioning_problem("verdict", counts)
    assert problem is not None
    assert "judge-verdicts.v1=4" in problem and "gate-results.v1=8" in problem
    assert "verdict-verdict-trials-changelog=8" in problem


def test_a_missing_input_is_refused() -> None:
    counts: dict[TopicRef, int | None] = dict.fromkeys(PROCESSORS["gate"].co_partitioned, 8)
    counts[Topic.SESSION_PERSISTED] = None
    assert "missing: session-persisted.v1" in (co_partitioning_problem("gate", counts) or "")


def test_a_processor_without_joins_is_never_refused() -> None:
    assert co_partitioning_problem("judge", {}) is None
    assert co_partitioning_problem("no-such-processor", {}) is None


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"kind": Kind.STREAM}, "declares its agents"),
        (
            {"kind": Kind.STREAM, "agents": {"a": (Topic.LABELS,)}, "tick": Topic.GATE_TICKS},
            "no agent reads its tick topic",
        ),
        (
            {"kind": Kind.STREAM, "agents": {"a": (Topic.LABELS,)}, "joined": (Topic.SCENARIOS,)},
            "joins topics it does not read",
        ),
        ({"kind": Kind.SERVER, "tables": (TableSpec("t", key="k"),)}, "a server has no"),
    ],
)
def test_an_inconsistent_declaration_is_refused(kwargs: dict, problem: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=problem):
        ProcessorSpec("x", metrics_offset=99, **kwargs)


def test_the_auditor_reads_what_it_reconciles_and_writes_nothing() -> None:
    audit = PROCESSORS["audit"]
    assert audit.inputs == () and audit.writes == ()  # no group, nothing consumed
    assert set(PROCESSORS["aggregate"].changelogs) <= set(audit.reads)
    assert {
        Topic.CONVERSATION_FINISHED,
        Topic.GATE_RESULTS,
        Topic.JUDGE_VERDICTS,
        Topic.TRIAL_VERDICTS,
        Topic.DEAD_LETTERS,
        Topic.SCENARIOS,
    } <= set(audit.reads)
