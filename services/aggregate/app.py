"""Aggregate processor wiring: count trial verdicts per run and per event-time window,
publish ScenarioReliability whenever a figure changes, export the reliability gauges.
What is done with each verdict is in steps.py; the logic in domain.py (counting),
batch.py (coalescing a batch's writes) and windows.py (window arithmetic)."""

from __future__ import annotations

import asyncio
import logging

import faust
from prometheus_client import REGISTRY, CollectorRegistry

from services.aggregate.metrics import AggregateMetrics, ReliabilityGauges
from services.aggregate.steps import Steps
from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import topic_name
from services.kafka.catalog import ScenarioCatalog
from services.runtime.app import DeadLetters, make_app, raw_topic, run_alongside
from services.runtime.metrics import common_metrics

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
    (verdicts_in,) = SPEC.agents["rekey"]
    (by_scenario_in,) = SPEC.agents["count"]
    trial_verdicts = raw_topic(app, verdicts_in, settings)
    by_scenario = raw_topic(app, by_scenario_in, settings)
    by_scenario_name = topic_name(by_scenario_in, settings)
    reject = DeadLetters(app, PROCESSOR, settings)
    (STATE,) = SPEC.tables  # one table: one verdict's writes, one changelog partition
    state = app.Table(STATE.name, default=None, partitions=settings.topic_partitions)
    catalog = ScenarioCatalog(settings)
    run_alongside(app, settings, catalog)

    async def send_unawaited(topic: str, key: bytes, value: bytes) -> None:
        """Hand a record to the Kafka producer without awaiting its delivery: Faust flushes
        the producer before each offset commit, so an offset is committed only after the
        records sent for it were delivered. Straight to the producer, not through the
        Faust topic, whose per-record bookkeeping (futures, sensors, codecs) showed in
        the profile."""
        delivery = await app.producer.send(topic, key, value, partition=None, timestamp=None,
                                           headers=None)
        delivery.add_done_callback(_log_failure)  # type: ignore[attr-defined]

    steps = Steps(settings=settings, processor=PROCESSOR, state=state, send=send_unawaited,
                  by_scenario=by_scenario_name, reject=reject, catalog=catalog,
                  gauges=ReliabilityGauges(registry), metrics=AggregateMetrics(registry),
                  events=common_metrics().events)

    @state.on_recover
    async def restore_gauges() -> None:
        steps.restore_gauges({tp.partition for tp in app.consumer.assignment()
                              if tp.topic == by_scenario_name})

    async def rekey(stream: faust.StreamT) -> None:
        async for event in stream.events():
            await reject.guard(event, steps.rekey)

    async def count(stream: faust.StreamT) -> None:
        """Verdicts are counted in batches (Steps.count). A batch is acked once its writes
        are applied, so an offset is committed only after they were delivered (Faust
        flushes before each commit)."""
        # take_events is on faust.Stream, missing from the StreamT protocol in its stubs.
        batches = stream.take_events(  # type: ignore[attr-defined]
            settings.aggregate_batch_max, within=settings.aggregate_batch_within_s)
        async for events in batches:
            await steps.count(events)

    app.agent(trial_verdicts)(rekey)
    app.agent(by_scenario)(count)
    app.timer(interval=5.0)(steps.alert_targets)
    return app
