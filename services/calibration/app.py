"""Calibration processor wiring: labels joined with their judge verdicts (by trial), folded
into each judge version's running matrix (by judge), published to judge-calibrations.v1
and kept in the store with the grown labelled set. What is done with each record is in
steps.py; the join and the fold themselves in domain.py.

Two agents, each on co-partitioned inputs so a table only changes inside its own stream:
`join` reads labels and judge verdicts (key: trial id) and re-keys each join by judge id
onto labelled-verdicts; `fold` reads those and the calibrations (key: judge id). Outputs
are delivered before a table records them; repeats are dropped by the tables (a label
counts once per trial and judge), so a SIGKILLed worker loses none and counts none twice.
"""

from __future__ import annotations

import faust
from prometheus_client import REGISTRY, CollectorRegistry

from services.calibration.metrics import CalibrationMetrics
from services.calibration.steps import Steps
from services.calibration.store import CalibrationStore
from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.runtime.agents import each_record, subscribe
from services.runtime.app import DeadLetters, make_app, raw_topic, run_alongside
from services.runtime.metrics import common_metrics

PROCESSOR = "calibration"
SPEC = PROCESSORS[PROCESSOR]  # its topics and tables


def build(settings: Settings, registry: CollectorRegistry = REGISTRY) -> faust.App:
    """The calibration's Faust app, its topics, tables, agents and store, from `settings`
    (`registry`: where its judge-calibration gauges are registered)."""
    app = make_app(PROCESSOR, settings)
    labelled = raw_topic(app, Topic.LABELLED_VERDICTS, settings)
    calibrations = raw_topic(app, Topic.JUDGE_CALIBRATIONS, settings)
    reject = DeadLetters(app, PROCESSOR, settings)
    JOINS, MATRICES = SPEC.tables
    joins = app.Table(JOINS.name, default=None, partitions=settings.topic_partitions)
    matrices = app.Table(MATRICES.name, default=None, partitions=settings.topic_partitions)
    run_alongside(app, settings)
    steps = Steps(
        settings=settings,
        processor=PROCESSOR,
        joins=joins,
        matrices=matrices,
        send_labelled=labelled.send,
        send_calibration=calibrations.send,
        reject=reject,
        store=CalibrationStore(settings.database_url),
        metrics=CalibrationMetrics(registry),
        events=common_metrics().events,
    )
    subscribe(
        app,
        SPEC,
        settings,
        {"join": each_record(reject, steps.join), "fold": each_record(reject, steps.fold)},
    )
    app.task(steps.start)
    return app
