"""Sink processor wiring: store every verdict, gate result, judge verdict and transcript in
the SQL projection. What rows an event makes lives in domain.py; how they are written, in
store.py. Database calls run in a thread so the event loop keeps serving the consumer."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

import faust
from pydantic import BaseModel
from sqlalchemy.exc import DataError, IntegrityError, InterfaceError, OperationalError

from schemas.events import ConversationFinished, GateResult, JudgeVerdict, TrialVerdict
from services.common.app import DeadLetters, make_app, raw_topic, run_alongside
from services.common.codec import Rejection, decode
from services.common.metrics import common_metrics
from services.common.outage import STORE, Dependency
from services.common.settings import get_settings
from services.common.topics import Topic
from services.sink import domain
from services.sink.store import Store

PROCESSOR = "sink"
log = logging.getLogger(__name__)
settings = get_settings()
app = make_app(PROCESSOR, settings)
store = Store(settings.database_url)
common = common_metrics()
database = Dependency(STORE, "sink: writing the projection")

# --------------------------------------------------------------------------- topics
trial_verdicts = raw_topic(app, Topic.TRIAL_VERDICTS, settings)
gate_results = raw_topic(app, Topic.GATE_RESULTS, settings)
judge_verdicts = raw_topic(app, Topic.JUDGE_VERDICTS, settings)
conversations = raw_topic(app, Topic.CONVERSATION_FINISHED, settings)
reject = DeadLetters(app, PROCESSOR, settings)
run_alongside(app, settings)


async def _write(record: domain.SinkEvent) -> Rejection | None:
    """Store one event. A database that is down or locked is waited for (the partition
    waits with it, so nothing is skipped; logged once per outage, every failed try
    counted); a row the database refuses is rejected."""
    try:
        await database.call("write", lambda: asyncio.to_thread(store.apply, record),
                            retry_on=(OperationalError, InterfaceError))
    except (DataError, IntegrityError) as exc:
        return Rejection("unwritable", str(exc.orig or exc)[:1000])
    return None


async def sink(event: faust.types.EventT, model: type[BaseModel]) -> None:
    decoded = decode(event.value, model, max_bytes=settings.max_event_bytes,
                   max_depth=settings.max_json_depth)
    if isinstance(decoded, Rejection):
        return await reject(event, decoded)
    problem = domain.problem_with(decoded)  # type: ignore[arg-type]
    if problem is not None:
        return await reject(event, Rejection("invalid_field", problem))
    refused = await _write(decoded)  # type: ignore[arg-type]
    if refused is not None:
        return await reject(event, refused)
    common.events.labels(PROCESSOR, "stored").inc()


# --------------------------------------------------------------------------- agents
@app.agent(trial_verdicts)
async def sink_trial_verdicts(stream: faust.StreamT) -> None:
    async for event in stream.events():
        await reject.guard(event, partial(sink, model=TrialVerdict))


@app.agent(gate_results)
async def sink_gate_results(stream: faust.StreamT) -> None:
    async for event in stream.events():
        await reject.guard(event, partial(sink, model=GateResult))


@app.agent(judge_verdicts)
async def sink_judge_verdicts(stream: faust.StreamT) -> None:
    async for event in stream.events():
        await reject.guard(event, partial(sink, model=JudgeVerdict))


@app.agent(conversations)
async def sink_transcripts(stream: faust.StreamT) -> None:
    async for event in stream.events():
        await reject.guard(event, partial(sink, model=ConversationFinished))


@app.task
async def start() -> None:
    # Create the tables before the first write, so the report works on an idle pipeline.
    try:
        await asyncio.to_thread(store.create_schema)
    except (OperationalError, InterfaceError) as exc:  # the first write will try again
        log.warning("sink: could not create the projection's tables yet (%s)", exc)
