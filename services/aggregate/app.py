"""Aggregate processor wiring: count trial verdicts per run and per event-time window,
publish ScenarioReliability whenever a figure changes, export the reliability gauges.
Logic lives in domain.py (counting) and windows.py (window arithmetic)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

import faust
from prometheus_client import REGISTRY, CollectorRegistry

from schemas.events import TrialVerdict
from services.aggregate import domain
from services.aggregate.batch import Batch
from services.aggregate.metrics import AggregateMetrics, ReliabilityGauges
from services.aggregate.windows import parse_windows
from services.contract.codec import Rejection, decode_or_reject, encode
from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.catalog import CatalogUnavailable, ScenarioCatalog
from services.runtime.app import DeadLetters, make_app, raw_topic, run_alongside
from services.runtime.metrics import common_metrics
from services.runtime.outbox import handling

PROCESSOR = "aggregate"
SPEC = PROCESSORS[PROCESSOR]  # its topics and table
log = logging.getLogger(__name__)


def _log_failure(delivery: asyncio.Future) -> None:  # type: ignore[type-arg]
    if not delivery.cancelled() and delivery.exception() is not None:
        log.warning("aggregate: a record was not delivered: %r", delivery.exception())


def build(settings: Settings, registry: CollectorRegistry = REGISTRY) -> faust.App:
    """The aggregate's Faust app, its topics, table, agents and timer, from `settings`
    (`registry`: where its own gauges and counters are registered)."""
    # Its sends are never awaited one by one (flushed before each commit), so they can
    # wait a few ms to share a request: the profile had a third of its time in socket
    # writes. A figure a second or two late matters to no one: the broker holds a fetch
    # until 100 kB (some 70 verdicts) gathered or 0.5 s passed, rather than answering each
    # verdict or two with a fetch of its own (half its CPU while verdicts trickled in,
    # bench/README.md).
    app = make_app(PROCESSOR, settings, linger_ms=10, fetch_min_bytes=100_000,
                   fetch_max_wait_ms=500)
    config = domain.Config(sizes=parse_windows(settings.windows),
                           retention_s=settings.dedup_retention_s,
                           max_skew_s=settings.max_clock_skew_s)

    # ----------------------------------------------------------------------- topics
    (verdicts_in,) = SPEC.agents["rekey"]
    (by_scenario_in,) = SPEC.agents["count"]
    trial_verdicts = raw_topic(app, verdicts_in, settings)
    by_scenario = raw_topic(app, by_scenario_in, settings)
    by_scenario_name = topic_name(by_scenario_in, settings)
    reliability_name = topic_name(Topic.SCENARIO_RELIABILITY, settings)
    reject = DeadLetters(app, PROCESSOR, settings)

    # ----------------------------------------------------------------------- tables
    # One table, so that one verdict's writes go to one changelog partition in order (see
    # domain.py on how a verdict read again after a crash finishes what was cut short).
    (STATE,) = SPEC.tables
    state = app.Table(STATE.name, default=None, partitions=settings.topic_partitions)
    catalog = ScenarioCatalog(settings)
    run_alongside(app, settings, catalog)
    gauges = ReliabilityGauges(registry)
    metrics = AggregateMetrics(registry)
    common = common_metrics()

    def read(key: str) -> dict | None:  # type: ignore[type-arg]
        return state.get(key)

    async def send_unawaited(topic: str, key: bytes, value: bytes) -> None:
        """Hand a record to the Kafka producer without awaiting its delivery: Faust flushes
        the producer before each offset commit, so an offset is committed only after the
        records sent for it were delivered. Straight to the producer, not through the
        Faust topic, whose per-record bookkeeping (futures, sensors, codecs) showed in
        the profile."""
        delivery = await app.producer.send(topic, key, value, partition=None, timestamp=None,
                                           headers=None)
        delivery.add_done_callback(_log_failure)  # type: ignore[attr-defined]

    @state.on_recover
    async def restore_gauges() -> None:
        # After a restart or a rebalance, the gauges show what the recovered table holds.
        # The memory store keeps what revoked partitions held: show only the assigned ones.
        mine = {tp.partition for tp in app.consumer.assignment()
                if tp.topic == by_scenario_name}
        gauges.reset_windows(b for b in domain.most_recent(list(state.items()), read, config)
                             if b.partition in mine)

    # ----------------------------------------------------------------------- agents
    async def rekey(stream: faust.StreamT) -> None:
        """Trial verdicts arrive keyed by trial; a scenario's windows need its every trial
        on one partition, so they go on keyed by scenario."""
        async for event in stream.events():
            await reject.guard(event, rekey_one)

    async def rekey_one(event: faust.types.EventT) -> None:
        verdict = decode_or_reject(event.value, TrialVerdict, settings)
        if isinstance(verdict, Rejection):
            return await reject(event, verdict)
        await send_unawaited(by_scenario_name, verdict.scenario_id.encode(), event.value)

    async def count(stream: faust.StreamT) -> None:
        """Verdicts are counted in batches, whose table writes and figures are coalesced
        (batch.py): a bucket is written, and its figure published, once per batch rather
        than once per verdict. A batch is acked once its writes are applied, so an offset
        is committed only after they were delivered (Faust flushes before each commit)."""
        # take_events is on faust.Stream, missing from the StreamT protocol in its stubs.
        batches = stream.take_events(  # type: ignore[attr-defined]
            settings.aggregate_batch_max, within=settings.aggregate_batch_within_s)
        async for events in batches:
            await count_batch(events)

    async def count_batch(events: list[faust.types.EventT]) -> None:
        batch: Batch[faust.types.EventT] = Batch(read)
        notes: Counter[str] = Counter()

        async def count_one(event: faust.types.EventT) -> None:
            verdict = decode_or_reject(event.value, TrialVerdict, settings)
            if isinstance(verdict, Rejection):  # checked upstream; a foreign writer, perhaps
                return await reject(event, verdict)
            if batch.starts_group(verdict):
                apply_group(batch)
            partition = event.message.partition
            step = domain.apply(batch.read, verdict, partition, config, now=time.time())
            batch.hold(verdict, step, event)
            for bucket in step.latest:
                gauges.set_window(bucket)
            if step.sweep:
                apply_group(batch)
                with handling(event):
                    sweep(partition)
            notes[step.note] += 1

        for event in events:
            await reject.guard(event, count_one)
        apply_group(batch)
        for bucket in batch.figures():
            target = gauges.target(bucket.scenario_id) or (settings.alert_min_pass_hat_k,
                                                            settings.alert_min_trials)
            await send_unawaited(reliability_name, bucket.scenario_id.encode(),
                                 encode(domain.record(bucket, target)))
        for note, n in notes.items():
            metrics.verdicts.labels(note).inc(n)
            common.events.labels(PROCESSOR, note).inc(n)

    def apply_group(batch: Batch[faust.types.EventT]) -> None:
        # Each write as the verdict that made it: Faust changelogs a write to the partition
        # of the event being handled (the verdict's, so a scenario's writes stay in order).
        for key, value, event in batch.group():
            with handling(event):
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value

    def sweep(partition: int) -> None:
        """Drop this partition's windows and trial memories past retention (event time)."""
        now = time.time()
        clock = domain.partition_clock(state.get(domain.clock_key(partition)),
                                       domain.ceiling(config, now))
        if clock is None:
            return
        keys, gone = domain.expired(list(state.items()), partition, clock.watermark, config,
                                    now)
        for key in keys:
            state.pop(key, None)
        for scenario_id, window in gone:
            gauges.remove_window(scenario_id, window)
        state[domain.clock_key(partition)] = domain.swept(clock.watermark)
        if keys:
            log.info("aggregate: partition %d dropped %d expired entries", partition, len(keys))

    async def alert_targets() -> None:
        """Each scenario's alert targets, from its latest published version."""
        try:
            await catalog.ready()
        except CatalogUnavailable as exc:
            log.warning("aggregate: %s", exc)
            return
        gauges.set_targets(catalog.latest().values(), settings.alert_min_pass_hat_k,
                           settings.alert_min_trials)

    app.agent(trial_verdicts)(rekey)
    app.agent(by_scenario)(count)
    app.timer(interval=5.0)(alert_targets)
    return app
