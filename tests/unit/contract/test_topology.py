"""The co-partitioning rule and the replication a cluster of N brokers gets."""

from __future__ import annotations

import pytest

from services.contract.topics import Topic
from services.contract.topology import (
    CO_PARTITIONED,
    PROCESSOR_INPUTS,
    PROCESSOR_OUTPUTS,
    co_partitioning_problem,
)
from services.kafka.admin import min_insync_for, replication_for


def test_equal_counts_may_run() -> None:
    assert co_partitioning_problem("gate", dict.fromkeys(CO_PARTITIONED["gate"], 8)) is None


def test_one_topic_with_other_count_is_refused_naming_every_count() -> None:
    counts = dict.fromkeys(CO_PARTITIONED["verdict"], 8) | {Topic.JUDGE_VERDICTS: 4}
    problem = co_partitioning_problem("verdict", counts)
    assert problem is not None
    assert "judge-verdicts.v1=4" in problem and "gate-results.v1=8" in problem


def test_a_missing_input_is_refused() -> None:
    counts = dict.fromkeys(CO_PARTITIONED["gate"], 8) | {Topic.SESSION_PERSISTED: None}
    assert "missing: session-persisted.v1" in (co_partitioning_problem("gate", counts) or "")


def test_a_processor_without_joins_is_never_refused() -> None:
    assert co_partitioning_problem("judge", {}) is None


def test_joined_topics_are_ones_the_processor_reads() -> None:
    from services.contract.topology import PROCESSOR_READS_BACK

    for processor, topics in CO_PARTITIONED.items():
        reads = set(PROCESSOR_INPUTS[processor]) | set(PROCESSOR_READS_BACK[processor])
        assert set(topics) <= reads, processor
        assert processor in PROCESSOR_OUTPUTS


def test_every_worker_has_its_topics_declared() -> None:
    from services.contract.processors import WORKERS
    from services.contract.topology import PROCESSOR_READS_BACK

    for name in WORKERS:
        assert name in PROCESSOR_INPUTS and name in PROCESSOR_OUTPUTS, name
        assert name in PROCESSOR_READS_BACK, name


@pytest.mark.parametrize(("brokers", "configured", "replicas", "min_isr"), [
    (1, 0, 1, 1), (2, 0, 2, 1), (3, 0, 3, 2), (5, 0, 3, 2), (3, 1, 1, 1), (1, 2, 2, 1)])
def test_replication_follows_the_cluster_unless_configured(
    brokers: int, configured: int, replicas: int, min_isr: int
) -> None:
    assert replication_for(brokers, configured) == replicas
    assert min_insync_for(replicas) == min_isr
