"""`passk rebuild`: recreate the SQL projection from the log.

Reads every partition of the sink's five topics from its first retained offset up to the
end offsets taken at the start, applies each event with the live sink's own store code,
into a fresh schema, and then computes every summary from scratch from the trial rows.
It keeps what the live sink keeps (domain.storable), and every write is an order-tolerant
upsert (services/storage/records.py), so the result equals what the live sink holds once
it has consumed the same records.
Stop the sink first, or rebuild into another database and point the report at it: a sink
writing while the tables are dropped would fail its writes until they exist again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kafka import KafkaConsumer, TopicPartition
from sqlalchemy.exc import DataError, IntegrityError

from services.contract.codec import Rejection
from services.contract.settings import Settings
from services.contract.topics import topic_name
from services.kafka.kafka_client import kafka_client_kwargs
from services.sink.domain import MODELS, storable
from services.storage import records as domain
from services.storage.store import Store


@dataclass
class RebuildStats:
    records: int = 0
    stored: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


Progress = Callable[[int, int], None]  # (records read so far, records to read)


def _store_batch(store: Store, batch: list[domain.SinkEvent], stats: RebuildStats) -> int:
    if not batch:
        return 0
    try:
        return store.apply_many(batch, summaries=False)
    except (DataError, IntegrityError):
        # One row the database refuses (the live sink dead-lettered it): store the rest.
        stored = 0
        for event in batch:
            try:
                stored += store.apply_many([event], summaries=False)
            except (DataError, IntegrityError):
                stats.skip("unwritable")
        return stored


def rebuild(
    settings: Settings,
    database_url: str | None = None,
    *,
    progress: Progress | None = None,
    batch_timeout_ms: int = 1000,
) -> RebuildStats:
    store = Store(database_url or settings.database_url)
    models = {topic_name(topic, settings): model for topic, model in MODELS.items()}
    consumer = KafkaConsumer(
        **kafka_client_kwargs(settings),
        group_id=None,  # no offsets committed: a rebuild leaves the live sink's group alone
        enable_auto_commit=False,
        max_poll_records=1000,
    )
    stats = RebuildStats()
    try:
        partitions = [
            TopicPartition(name, p)
            for name in models
            for p in sorted(consumer.partitions_for_topic(name) or ())
        ]
        missing = [name for name in models if not any(tp.topic == name for tp in partitions)]
        if missing:
            raise RuntimeError(f"topics not found: {', '.join(missing)} (passk topics create?)")
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        start = consumer.beginning_offsets(partitions)
        end = consumer.end_offsets(partitions)
        total = sum(end[tp] - start[tp] for tp in partitions)
        store.reset()
        if progress:
            progress(0, total)
        remaining = {tp for tp in partitions if end[tp] > start[tp]}
        while remaining:
            batch: list[domain.SinkEvent] = []
            for tp, records in consumer.poll(timeout_ms=batch_timeout_ms).items():
                for record in records:
                    if record.offset >= end[tp]:
                        continue  # written after the rebuild started: the live sink's part
                    stats.records += 1
                    event = storable(record.value, models[tp.topic], settings)
                    if isinstance(event, Rejection):
                        stats.skip(event.reason)
                    else:
                        batch.append(event)
            stats.stored += _store_batch(store, batch, stats)
            remaining = {tp for tp in remaining if consumer.position(tp) < end[tp]}
            if progress:
                progress(stats.records, total)
        # Summaries from scratch, once, from the loaded rows: the live sink's incremental
        # counts must come to the same (tests/unit/storage/store_contract.py).
        store.recompute_summaries()
        return stats
    finally:
        consumer.close()
