"""What the aggregate does with each trial verdict: re-key it by scenario, count it in its
run and windows (domain.py) in batches whose writes are coalesced (batch.py), publish the
figures that changed, and keep the reliability gauges to what the table holds."""

from __future__ import annotations

import logging
import time
from collections import Counter as Notes
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from schemas.events import TrialVerdict
from services.aggregate import domain
from services.aggregate.batch import Batch
from services.aggregate.metrics import AggregateMetrics, ReliabilityGauges
from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.grading.windows import parse_windows
from services.kafka.catalog import CatalogUnavailable, ScenarioCatalog
from services.runtime.app import DeadLetters, Record
from services.runtime.outbox import handling

log = logging.getLogger(__name__)

Send = Callable[[str, bytes, bytes], Awaitable[None]]  # (topic, key, value), not awaited


@dataclass(kw_only=True)
class Steps:
    """`state` is the worker's one table, so that one verdict's writes go to one changelog
    partition in order (see domain.py on how a verdict read again after a crash finishes
    what was cut short). `send` hands a record to the producer without awaiting its
    delivery: the producer is flushed before each offset commit."""

    settings: Settings
    processor: str
    state: MutableMapping[str, Any]
    send: Send
    by_scenario: str  # the name of the topic verdicts are re-keyed onto
    reject: DeadLetters
    catalog: ScenarioCatalog
    gauges: ReliabilityGauges
    metrics: AggregateMetrics
    events: Counter  # passk_events_total: by processor, what it made of a record
    clock: Callable[[], float] = time.time  # the wall clock, which bounds event time

    def __post_init__(self) -> None:
        self.config = domain.Config(
            sizes=parse_windows(self.settings.windows),
            retention_s=self.settings.dedup_retention_s,
            max_skew_s=self.settings.max_clock_skew_s,
        )
        self.reliability_name = topic_name(Topic.SCENARIO_RELIABILITY, self.settings)

    def read(self, key: str) -> dict | None:  # type: ignore[type-arg]
        return self.state.get(key)

    def restore_gauges(self, mine: set[int]) -> None:
        """After a restart or a rebalance, the gauges show what the recovered table holds.
        The memory store keeps what revoked partitions held: `mine` are the assigned ones."""
        self.gauges.reset_windows(
            b
            for b in domain.most_recent(list(self.state.items()), self.read, self.config)
            if b.partition in mine
        )

    async def rekey(self, event: Record) -> None:
        """Trial verdicts arrive keyed by trial; a scenario's windows need its every trial
        on one partition, so they go on keyed by scenario."""
        if (verdict := await self.reject.decoded(event, TrialVerdict)) is None:
            return
        await self.send(self.by_scenario, verdict.scenario_id.encode(), event.value)

    async def count(self, events: Sequence[Record]) -> None:
        """One batch: its table writes and figures are coalesced (batch.py), a bucket
        written, and its figure published, once per batch rather than once per verdict."""
        batch: Batch[Record] = Batch(self.read)
        notes: Notes[str] = Notes()

        async def count_one(event: Record) -> None:
            # checked upstream; refused here too (a foreign writer, perhaps)
            if (verdict := await self.reject.decoded(event, TrialVerdict)) is None:
                return
            if batch.starts_group(verdict):
                self.apply_group(batch)
            partition = event.message.partition
            step = domain.apply(batch.read, verdict, partition, self.config, now=self.clock())
            batch.hold(verdict, step, event)
            for bucket in step.latest:
                self.gauges.set_window(bucket)
            if step.sweep:
                self.apply_group(batch)
                with handling(event):
                    self.sweep(partition)
            notes[step.note] += 1

        for event in events:
            await self.reject.guard(event, count_one)
        self.apply_group(batch)
        for bucket in batch.figures():
            target = self.gauges.target(bucket.scenario_id) or (
                self.settings.alert_min_pass_hat_k,
                self.settings.alert_min_trials,
            )
            await self.send(
                self.reliability_name,
                bucket.scenario_id.encode(),
                encode(domain.record(bucket, target)),
            )
        for note, n in notes.items():
            self.metrics.verdicts.labels(note).inc(n)
            self.events.labels(self.processor, note).inc(n)

    def apply_group(self, batch: Batch[Record]) -> None:
        # Each write as the verdict that made it: Faust changelogs a write to the partition
        # of the event being handled (the verdict's, so a scenario's writes stay in order).
        for key, value, event in batch.group():
            with handling(event):
                if value is None:
                    self.state.pop(key, None)
                else:
                    self.state[key] = value

    def sweep(self, partition: int) -> None:
        """Drop this partition's windows and trial memories past retention (event time)."""
        now = self.clock()
        clock = domain.partition_clock(
            self.state.get(domain.clock_key(partition)), domain.ceiling(self.config, now)
        )
        if clock is None:
            return
        keys, gone = domain.expired(
            list(self.state.items()), partition, clock.watermark, self.config, now
        )
        for key in keys:
            self.state.pop(key, None)
        for scenario_id, window in gone:
            self.gauges.remove_window(scenario_id, window)
        self.state[domain.clock_key(partition)] = domain.swept(clock.watermark)
        if keys:
            log.info("aggregate: partition %d dropped %d expired entries", partition, len(keys))

    async def alert_targets(self) -> None:
        """Each scenario's alert targets, from its latest published version."""
        try:
            await self.catalog.ready()
        except CatalogUnavailable as exc:
            log.warning("aggregate: %s", exc)
            return
        self.gauges.set_targets(
            self.catalog.latest().values(),
            self.settings.alert_min_pass_hat_k,
            self.settings.alert_min_trials,
        )
