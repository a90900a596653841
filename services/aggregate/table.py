"""The aggregate's table and offsets from outside the worker, with kafka-python (no Faust):
read as its changelog holds it, rewritten with a recount's corrections, and its group's
offsets moved past what the recount read, so a restarted aggregate continues from the
recounted table. Only while no aggregate worker runs (the commands check)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from schemas.events import TrialVerdict
from services.aggregate import domain
from services.aggregate.recount import Correction, Table
from services.contract.codec import Rejection, decode_or_reject, encode
from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.kafka_client import kafka_client_kwargs
from services.kafka.scan import Progress, partition_of, scan

PROCESSOR = "aggregate"


def changelog_name(settings: Settings) -> str:
    (changelog,) = PROCESSORS[PROCESSOR].changelogs
    return topic_name(changelog, settings)


def group_id(settings: Settings) -> str:
    return f"{settings.topic_prefix}{PROCESSOR}"


def _partition_count(settings: Settings, topic: str) -> int:
    consumer = KafkaConsumer(**kafka_client_kwargs(settings), group_id=None)
    try:
        return len(consumer.partitions_for_topic(topic) or ()) or settings.topic_partitions
    finally:
        consumer.close()


def scenario_partitioner(settings: Settings) -> Callable[[str], int]:
    """The table partition of a scenario: the one its re-keyed verdicts go to."""
    count = _partition_count(settings, topic_name(Topic.AGGREGATE_BY_SCENARIO, settings))
    return lambda scenario_id: partition_of(scenario_id, count)


def read_table(settings: Settings, progress: Progress | None = None) -> Table:
    """The table as its changelog holds it: each key's last value (a tombstone deletes)."""
    table: Table = {}

    def fold(records: Sequence[Any]) -> None:
        for r in records:
            key = json.loads(r.key) if r.key else None
            if not isinstance(key, str):
                continue
            if r.value is None:
                table.pop(key, None)
            else:
                table[key] = json.loads(r.value)

    scan(settings, changelog_name(settings), fold, progress=progress)
    return table


class DiskTable:
    """The table as its changelog holds it, copied into a SQLite file: the audit of a week
    of trials reads it one key at a time instead of holding every trial's memory."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT)")

    def fold(self, records: Sequence[Any]) -> None:
        upserts, deletes = [], []
        for r in records:
            key = json.loads(r.key) if r.key else None
            if not isinstance(key, str):
                continue
            if r.value is None:
                deletes.append((key,))
            else:
                upserts.append((key, r.value.decode("utf-8")))
        # one record at a time would be exact; a batch's deletes after its writes is too,
        # unless a key is written after its tombstone within one batch: keep log order
        if deletes and upserts:
            for r in records:
                key = json.loads(r.key) if r.key else None
                if not isinstance(key, str):
                    continue
                if r.value is None:
                    self.db.execute("DELETE FROM state WHERE key = ?", (key,))
                else:
                    self.db.execute(
                        "INSERT OR REPLACE INTO state VALUES (?, ?)", (key, r.value.decode("utf-8"))
                    )
            return
        self.db.executemany("INSERT OR REPLACE INTO state VALUES (?, ?)", upserts)
        self.db.executemany("DELETE FROM state WHERE key = ?", deletes)

    def get(self, key: str) -> Any:
        row = self.db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def buckets(self) -> Iterator[tuple[str, Any]]:
        rows = self.db.execute("SELECT key, value FROM state WHERE key >= 'b|' AND key < 'b}'")
        return ((key, json.loads(value)) for key, value in rows)


def copy_table(settings: Settings, path: Path, progress: Progress | None = None) -> DiskTable:
    """The aggregate's table, from its changelog, in a SQLite file at `path`."""
    table = DiskTable(path)
    scan(settings, changelog_name(settings), table.fold, progress=progress)
    return table


def read_verdicts(
    settings: Settings, scenarios: set[str] | None, progress: Progress | None = None
) -> tuple[list[tuple[TrialVerdict, float]], dict[int, int]]:
    """Each trial's newest verdict on the log (of `scenarios`; None: all), with when the log
    took it, oldest event time first; and the end offsets read up to, by partition."""
    newest: dict[str, tuple[TrialVerdict, float]] = {}

    def fold(records: Sequence[Any]) -> None:
        for r in records:
            verdict = decode_or_reject(r.value, TrialVerdict, settings)
            if isinstance(verdict, Rejection):
                continue  # the aggregate dead-letters it too
            if scenarios is not None and verdict.scenario_id not in scenarios:
                continue
            held = newest.get(verdict.trial_id)
            if held is None or verdict.attempt > held[0].attempt:
                # only what counting needs: a week of verdicts' checks would not fit
                slim = verdict.model_copy(update={"failed_checks": [], "checks_passed": []})
                newest[verdict.trial_id] = (slim, r.timestamp / 1000)

    ends = scan(settings, topic_name(Topic.TRIAL_VERDICTS, settings), fold, progress=progress)
    ordered = sorted(
        newest.values(),
        key=lambda pair: (
            pair[0].finished_at is None,
            pair[0].finished_at.timestamp() if pair[0].finished_at else 0.0,
            pair[0].trial_id,
        ),
    )
    return ordered, ends


WRITE_CHUNK = 5000  # corrections sent, then acknowledged, at a time


def write_corrections(
    settings: Settings,
    writes: Sequence[Correction],
    figures: Iterable[domain.Bucket],
    target: Callable[[str], tuple[float, int]],
) -> None:
    """The corrections to the changelog (each to its scenario's table partition, in order),
    then the recounted figures to `scenario-reliability`; every send acknowledged."""
    producer = KafkaProducer(
        **kafka_client_kwargs(settings),
        acks="all",
        max_in_flight_requests_per_connection=1,
        # Retried for up to a minute, not five times: a partition without its leader yet (a
        # topic just created, a leader moving) answers NotLeaderForPartition for longer
        # than five quick retries on a loaded broker (the integration test met it).
        delivery_timeout_ms=60_000,
        request_timeout_ms=15000,
        max_block_ms=15000,
        max_request_size=settings.max_event_bytes + 4096,
    )
    try:
        changelog = changelog_name(settings)
        reliability = topic_name(Topic.SCENARIO_RELIABILITY, settings)
        # Both topics' metadata first: asked for behind a queue of changelog batches, the
        # second topic's took more than max_block_ms (writing a 320,000-trial recount failed).
        for topic in (changelog, reliability):
            producer.partitions_for(topic)
        records: list[tuple[str, bytes, bytes | None, int | None]] = [
            (changelog, json.dumps(c.key).encode(), _encoded(c.value), c.partition) for c in writes
        ]
        records += [
            (
                reliability,
                b.scenario_id.encode(),
                encode(domain.record(b, target(b.scenario_id))),
                None,
            )
            for b in figures
        ]
        # In acknowledged chunks: a send never waits long for room in the producer's buffer
        # however many corrections there are (one producer, one request in flight: in order).
        for start in range(0, len(records), WRITE_CHUNK):
            futures = [
                producer.send(topic, key=key, value=value, partition=partition)
                for topic, key, value, partition in records[start : start + WRITE_CHUNK]
            ]
            for future in futures:
                future.get(timeout=75)  # past the delivery timeout: what it gave up
    finally:
        producer.close(timeout=10)


def _encoded(value: Any) -> bytes | None:
    return None if value is None else json.dumps(value).encode()


def move_offsets(settings: Settings, verdict_ends: dict[int, int]) -> None:
    """The aggregate's group continues after what the recount read: its verdict input at the
    offsets the recount read up to, its re-keyed topic at its end (everything on it was
    forwarded from verdicts before those offsets: no worker ran since)."""
    verdicts = topic_name(Topic.TRIAL_VERDICTS, settings)
    rekeyed = topic_name(Topic.AGGREGATE_BY_SCENARIO, settings)
    consumer = KafkaConsumer(
        **kafka_client_kwargs(settings), group_id=group_id(settings), enable_auto_commit=False
    )
    try:
        parts = consumer.partitions_for_topic(rekeyed) or set()
        tps = [TopicPartition(rekeyed, p) for p in sorted(parts)]
        ends = consumer.end_offsets(tps) if tps else {}
        offsets = {
            TopicPartition(verdicts, p): OffsetAndMetadata(o, "", -1)
            for p, o in verdict_ends.items()
        }
        offsets.update({tp: OffsetAndMetadata(o, "", -1) for tp, o in ends.items()})
        consumer.commit(offsets)
    finally:
        consumer.close()
