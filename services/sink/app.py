"""Sink processor wiring: store every verdict, gate result, judge verdict and transcript in
the SQL projection. What rows an event makes lives in domain.py; how they are written, in
store.py. Database calls run in a thread so the event loop keeps serving the consumer.

One agent reads the five topics and writes what it has read in batches (at most
PASSK_SINK_BATCH_MAX events, one transaction each); Faust's take buffer stops reading while
a batch is being written, so a slow database slows the reading rather than filling memory,
and a batch's offsets are acknowledged only once its transaction has committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from functools import partial

import faust
from pydantic import BaseModel
from sqlalchemy.exc import DataError, IntegrityError, InterfaceError, OperationalError

from schemas.events import (
    ConversationFinished,
    GateResult,
    JudgeVerdict,
    ScenarioReliability,
    TrialVerdict,
)
from services.contract.codec import Rejection, decode_or_reject
from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.runtime.app import (
    INFRASTRUCTURE_ERRORS,
    DeadLetters,
    make_app,
    raw_inputs,
    run_alongside,
)
from services.runtime.metrics import common_metrics
from services.runtime.outage import STORE, Dependency
from services.storage import records as domain
from services.storage.store import Store

PROCESSOR = "sink"
SPEC = PROCESSORS[PROCESSOR]  # its topics
log = logging.getLogger(__name__)
# What each input topic holds.
MODELS: dict[Topic, type[BaseModel]] = {
    Topic.TRIAL_VERDICTS: TrialVerdict,
    Topic.GATE_RESULTS: GateResult,
    Topic.JUDGE_VERDICTS: JudgeVerdict,
    Topic.CONVERSATION_FINISHED: ConversationFinished,
    # The aggregate's window records, for `passk windows` and the pictures over time.
    Topic.SCENARIO_RELIABILITY: ScenarioReliability,
}


def build(settings: Settings) -> faust.App:
    """The sink's Faust app, its inputs, agent and store, from `settings`."""
    app = make_app(PROCESSOR, settings)
    store = Store(settings.database_url)
    common = common_metrics()
    database = Dependency(STORE, "sink: writing the projection")

    # ----------------------------------------------------------------------- topics
    models = {topic_name(topic, settings): model for topic, model in MODELS.items()}
    inputs = raw_inputs(app, *SPEC.agents["sink"], settings=settings)
    reject = DeadLetters(app, PROCESSOR, settings)
    run_alongside(app, settings)

    async def write(batch: list[domain.SinkEvent]) -> Exception | None:
        """Store a batch in one transaction. A database that is down or locked is waited
        for (the stream waits with it, so nothing is skipped; logged once per outage, every
        failed try counted); the error of a row the database refuses is returned."""
        try:
            await database.call("write", lambda: asyncio.to_thread(store.apply_many, batch),
                                retry_on=(OperationalError, InterfaceError))
        except (DataError, IntegrityError) as exc:
            return exc
        return None

    def usable(event: faust.types.EventT) -> domain.SinkEvent | Rejection:
        decoded = decode_or_reject(event.value, models[event.message.topic], settings)
        if isinstance(decoded, Rejection):
            return decoded
        problem = domain.problem_with(decoded)  # type: ignore[arg-type]
        if problem is not None:
            return Rejection("invalid_field", problem)
        return decoded  # type: ignore[return-value]

    async def sink_batch(events: Sequence[faust.types.EventT]) -> None:
        good: list[tuple[faust.types.EventT, domain.SinkEvent]] = []

        async def take(event: faust.types.EventT) -> None:
            found = usable(event)
            if isinstance(found, Rejection):
                await reject(event, found)
            else:
                good.append((event, found))

        for event in events:
            await reject.guard(event, take)  # a record no check foresaw is dead-lettered alone
        if not good:
            return
        try:
            refused: Exception | None = await write([record for _, record in good])
        except INFRASTRUCTURE_ERRORS:
            raise
        except Exception as exc:  # one record spoils the batch: find it below, record by record
            refused = exc
        if refused is None:
            common.events.labels(PROCESSOR, "stored").inc(len(good))
            return
        # One row the database refuses spoils the transaction: write the batch one by one
        # so only that row is dead-lettered (rare: the decoder has checked the fields).
        for event, record in good:
            await reject.guard(event, partial(store_one, record=record))

    async def store_one(event: faust.types.EventT, record: domain.SinkEvent) -> None:
        problem = await write([record])
        if problem is not None:
            orig = getattr(problem, "orig", None) or problem
            await reject(event, Rejection("unwritable", str(orig)[:1000]))
            return
        common.events.labels(PROCESSOR, "stored").inc()

    # ----------------------------------------------------------------------- agents
    async def sink(stream: faust.StreamT) -> None:
        # take_events is on faust.Stream, missing from the StreamT protocol in its stubs.
        batches = stream.take_events(  # type: ignore[attr-defined]
            settings.sink_batch_max, within=settings.sink_batch_within_s)
        async for events in batches:
            await sink_batch(events)

    async def start() -> None:
        # Create the tables before the first write, so the report works on an idle pipeline.
        try:
            await asyncio.to_thread(store.create_schema)
        except (OperationalError, InterfaceError) as exc:  # the first write will try again
            log.warning("sink: could not create the projection's tables yet (%s)", exc)

    app.agent(inputs)(sink)
    app.task(start)
    return app
