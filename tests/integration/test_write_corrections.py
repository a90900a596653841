"""A recount's writes on the real broker (services/aggregate/table.write_corrections): every
correction on the aggregate's changelog, each partition's in the order given, then the
figures on scenario-reliability, however many chunks they take."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from services.aggregate import table as table_module
from services.aggregate.domain import Bucket
from services.aggregate.recount import Correction
from services.aggregate.table import changelog_name, write_corrections
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.kafka.kafka_client import kafka_client_kwargs
from tests.support import read_topic

pytestmark = pytest.mark.integration


def changelog_records(settings: Settings) -> list[tuple[int, str, Any]]:
    """(partition, key, value) of every changelog record, each partition in log order."""
    name = changelog_name(settings)
    consumer = KafkaConsumer(**kafka_client_kwargs(settings), enable_auto_commit=False)
    try:
        tps = [TopicPartition(name, p) for p in sorted(consumer.partitions_for_topic(name))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        out = []
        while any(consumer.position(tp) < end[tp] for tp in tps):
            for records in consumer.poll(timeout_ms=1000).values():
                out += [
                    (r.partition, json.loads(r.key), r.value and json.loads(r.value))
                    for r in records
                ]
        return out
    finally:
        consumer.close()


def test_every_correction_in_order_then_the_figures(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_module, "WRITE_CHUNK", 700)  # several acknowledged chunks
    writes = [
        Correction(
            key=f"m|s{i % 4}|t{i}",
            value=None if i % 9 == 0 else {"n": i},
            partition=i % 4,
        )
        for i in range(3000)
    ]
    figures = [
        Bucket(scenario_id=f"s{i}", k=3, passed=i, failed=1, partition=i, run_id="r", seq=i + 1)
        for i in range(4)
    ]
    write_corrections(settings, writes, figures, lambda _: (0.5, 3))
    got = changelog_records(settings)
    assert len(got) == len(writes)
    for partition in range(4):
        sent = [(c.key, c.value) for c in writes if c.partition == partition]
        assert [(k, v) for p, k, v in got if p == partition] == sent
    published = read_topic(settings, Topic.SCENARIO_RELIABILITY)
    assert sorted((v["scenario_id"], v["passed"], v["failed"]) for _, v, _ in published) == [
        (f"s{i}", i, 1) for i in range(4)
    ]
