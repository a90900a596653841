"""Sink processor wiring: store every verdict, gate result, judge verdict and transcript in
the SQL projection. What is done with each batch: steps.py; what rows an event makes:
services/storage/records.py; how they are written: services/storage/store.py.

One agent reads the five topics and writes what it has read in batches (at most
PASSK_SINK_BATCH_MAX events, one transaction each); Faust's take buffer stops reading while
a batch is being written, so a slow database slows the reading rather than filling memory,
and a batch's offsets are acknowledged only once its transaction has committed.
"""

from __future__ import annotations

import faust

from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.runtime.agents import in_batches, subscribe
from services.runtime.app import DeadLetters, make_app, run_alongside
from services.runtime.metrics import common_metrics
from services.runtime.outage import STORE, Dependency
from services.sink.steps import Steps
from services.storage.store import Store

PROCESSOR = "sink"
SPEC = PROCESSORS[PROCESSOR]  # its topics


def build(settings: Settings) -> faust.App:
    """The sink's Faust app, its inputs, agent and store, from `settings`."""
    app = make_app(PROCESSOR, settings)
    reject = DeadLetters(app, PROCESSOR, settings)
    run_alongside(app, settings)
    steps = Steps(
        settings,
        store=Store(settings.database_url),
        database=Dependency(STORE, "sink: writing the projection"),
        reject=reject,
        processor=PROCESSOR,
        common=common_metrics(),
    )
    subscribe(
        app,
        SPEC,
        settings,
        {
            "sink": in_batches(
                steps.sink_batch,
                batch_max=settings.sink_batch_max,
                within_s=settings.sink_batch_within_s,
            )
        },
    )
    app.task(steps.create_tables)
    return app
