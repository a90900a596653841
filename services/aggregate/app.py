"""Aggregate processor wiring: count trial verdicts per run and per event-time window,
publish ScenarioReliability whenever a figure changes, export the reliability gauges.
What is done with each verdict is in steps.py; the logic in domain.py (counting),
batch.py (coalescing a batch's writes) and windows.py (window arithmetic)."""

from __future__ import annotations

import faust
from prometheus_client import REGISTRY, CollectorRegistry

from services.aggregate.metrics import AggregateMetrics, ReliabilityGauges
from services.aggregate.steps import Steps
from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import topic_name
from services.kafka.catalog import ScenarioCatalog
from services.runtime.agents import each_record, in_batches, subscribe
from services.runtime.app import DeadLetters, make_app, run_alongside, unawaited_sender
from services.runtime.metrics import common_metrics

PROCESSOR = "aggregate"
SPEC = PROCESSORS[PROCESSOR]  # its topics and table


def build(settings: Settings, registry: CollectorRegistry = REGISTRY) -> faust.App:
    """The aggregate's Faust app, its topics, table, agents and timer, from `settings`
    (`registry`: where its own gauges and counters are registered)."""
    # Its sends are never awaited one by one (flushed before each commit), so they can
    # wait a few ms to share a request: the profile had a third of its time in socket
    # writes. A figure a second or two late matters to no one: the broker holds a fetch
    # until 100 kB (some 70 verdicts) gathered or 0.5 s passed, rather than answering each
    # verdict or two with a fetch of its own (half its CPU while verdicts trickled in,
    # bench/README.md).
    app = make_app(
        PROCESSOR, settings, linger_ms=10, fetch_min_bytes=100_000, fetch_max_wait_ms=500
    )
    (by_scenario_in,) = SPEC.agents["count"]
    by_scenario_name = topic_name(by_scenario_in, settings)
    reject = DeadLetters(app, PROCESSOR, settings)
    (STATE,) = SPEC.tables  # one table: one verdict's writes, one changelog partition
    state = app.Table(STATE.name, default=None, partitions=settings.topic_partitions)
    catalog = ScenarioCatalog(settings)
    run_alongside(app, settings, catalog)
    steps = Steps(
        settings=settings,
        processor=PROCESSOR,
        state=state,
        send=unawaited_sender(app, PROCESSOR),
        by_scenario=by_scenario_name,
        reject=reject,
        catalog=catalog,
        gauges=ReliabilityGauges(registry),
        metrics=AggregateMetrics(registry),
        events=common_metrics().events,
    )

    @state.on_recover
    async def restore_gauges() -> None:
        steps.restore_gauges(
            {tp.partition for tp in app.consumer.assignment() if tp.topic == by_scenario_name}
        )

    # Counted in batches (Steps.count), each acked once its writes are applied: an offset
    # is committed only after they were delivered (Faust flushes before each commit).
    subscribe(
        app,
        SPEC,
        settings,
        {
            "rekey": each_record(reject, steps.rekey),
            "count": in_batches(
                steps.count,
                batch_max=settings.aggregate_batch_max,
                within_s=settings.aggregate_batch_within_s,
            ),
        },
    )
    app.timer(interval=5.0)(steps.alert_targets)
    return app
