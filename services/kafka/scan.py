"""Reading a whole topic (or what it holds since a time) once, up to the end offsets it had
when the scan began, in bounded batches: for the commands that reconcile or rebuild from
the log (`passk audit`, `passk aggregate recount`). Nothing is committed; no group."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.partitioner.default import murmur2

from services.contract.settings import Settings
from services.kafka.kafka_client import kafka_client_kwargs

Progress = Callable[[int, int], None]  # (records read so far, records to read)
Batch = Callable[[Sequence[Any]], None]  # kafka-python ConsumerRecords, in partition order

BATCH = 2000  # records handed on at once: what a scan holds in memory


def partition_of(key: str, partitions: int) -> int:
    """Where Kafka's default partitioner (Java's, kafka-python's, aiokafka's) puts a key."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


class TopicMissing(RuntimeError):
    pass


class ScanTimedOut(RuntimeError):
    pass


def scan(
    settings: Settings,
    topic: str,
    on_batch: Batch,
    *,
    since_ms: int | None = None,
    progress: Progress | None = None,
    timeout: float | None = None,
) -> dict[int, int]:
    """Hand every record of `topic` (from `since_ms`, log time, when given) to `on_batch`,
    up to the end offsets taken at the start. Returns those end offsets by partition."""
    ends: dict[int, int] = {}
    for batch in batches(
        settings, topic, since_ms=since_ms, progress=progress, timeout=timeout, ends=ends
    ):
        on_batch(batch)
    return ends


def batches(
    settings: Settings,
    topic: str,
    *,
    since_ms: int | None = None,
    progress: Progress | None = None,
    timeout: float | None = None,
    ends: dict[int, int] | None = None,
) -> Iterator[list[Any]]:
    """The records of `scan`, a batch at a time (at most BATCH records, one partition's);
    `ends` is filled with the end offsets as soon as they are known. TopicMissing when the
    topic is not there, ScanTimedOut past `timeout` seconds (None: no bound)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    # The fetch buffers bounded too (kafka-python's default lets one fetch hold 50 MB):
    # what a scan holds does not grow with the topic.
    consumer = KafkaConsumer(
        **kafka_client_kwargs(settings),
        group_id=None,
        enable_auto_commit=False,
        max_poll_records=BATCH,
        fetch_max_bytes=4 * 1024 * 1024,
        max_partition_fetch_bytes=1024 * 1024,
        isolation_level="read_committed",
    )
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise TopicMissing(f"topic {topic} not found (passk topics create?)")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        end = consumer.end_offsets(tps)
        if ends is not None:
            ends.update({tp.partition: end[tp] for tp in tps})
        start = consumer.beginning_offsets(tps)
        if since_ms is not None:
            found = consumer.offsets_for_times({tp: since_ms for tp in tps})
            start = {tp: (found[tp].offset if found.get(tp) is not None else end[tp]) for tp in tps}
        for tp in tps:
            consumer.seek(tp, start[tp])
        total = sum(max(0, end[tp] - start[tp]) for tp in tps)
        done = 0
        remaining = {tp for tp in tps if end[tp] > start[tp]}
        while remaining:
            if deadline is not None and time.monotonic() > deadline:
                raise ScanTimedOut(f"timed out reading {topic} after {timeout:g} s")
            for tp, records in consumer.poll(timeout_ms=1000, max_records=BATCH).items():
                wanted = [r for r in records if r.offset < end[tp]]
                if wanted:
                    yield wanted
                    done += len(wanted)
            remaining = {tp for tp in remaining if consumer.position(tp) < end[tp]}
            if progress:
                progress(done, total)
    finally:
        consumer.close()
