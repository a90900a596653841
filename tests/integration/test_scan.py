"""The bounded whole-topic scan (services/kafka/scan.py) on the real broker: what the audit,
the recount, the catalog's sync read and `passk dead-letters` read a topic with."""

from __future__ import annotations

import pytest

from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka import scan as scan_module
from services.kafka.scan import ScanTimedOut, TopicMissing, batches, partition_of, scan
from tests.support import produce

pytestmark = pytest.mark.integration


def test_every_record_once_in_partition_order_up_to_the_end_at_the_start(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan_module, "BATCH", 7)  # several batches per partition
    sent = [(f"k{i % 13}", f"v{i}".encode()) for i in range(200)]
    produce(settings, Topic.DEAD_LETTERS, sent)
    name = topic_name(Topic.DEAD_LETTERS, settings)
    seen: list[tuple[int, int, bytes]] = []
    sizes: list[int] = []

    def on_batch(records: list[object]) -> None:
        sizes.append(len(records))
        seen.extend((r.partition, r.offset, r.value) for r in records)  # type: ignore[attr-defined]

    ends = scan(settings, name, on_batch)
    assert sorted(v for *_, v in seen) == sorted(v for _, v in sent)  # each once
    assert max(sizes) <= 7
    assert sum(ends.values()) == 200
    for partition in {p for p, *_ in seen}:
        offsets = [o for p, o, _ in seen if p == partition]
        assert offsets == sorted(offsets)
    # the default partitioner's placement, as partition_of computes it
    count = len(ends)
    for p, _, value in seen:
        key = next(k for k, v in sent if v == value)
        assert p == partition_of(key, count)


def test_a_missing_topic_and_a_deadline_are_errors_of_their_own(settings: Settings) -> None:
    with pytest.raises(TopicMissing):
        list(batches(settings, "no-such-topic-" + settings.topic_prefix))
    produce(settings, Topic.DEAD_LETTERS, [("k", b"v")] * 50)
    with pytest.raises(ScanTimedOut, match="timed out reading"):
        list(batches(settings, topic_name(Topic.DEAD_LETTERS, settings), timeout=0))
