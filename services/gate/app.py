"""Gate processor wiring: join conversation-finished and session-persisted by session_id,
grade both gates, publish one GateResult per gate. Logic lives in domain.py and gates.py."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime

import faust

from schemas.events import ConversationFinished, GateResult, JudgeRequest, SessionPersisted
from services.contract.codec import Rejection, decode, encode
from services.contract.deadletter import dead_letter
from services.contract.eventtime import in_future, reference_time
from services.contract.processors import PROCESSORS
from services.contract.settings import get_settings
from services.contract.topics import Topic, topic_name
from services.gate import domain
from services.gate.gates import gates_for, regrade_gates
from services.gate.metrics import GateMetrics
from services.kafka.catalog import ScenarioCatalog
from services.runtime.app import (
    DeadLetters,
    Delivery,
    make_app,
    raw_inputs,
    raw_topic,
    run_alongside,
)
from services.runtime.flow import join_flow
from services.runtime.graded import KeyedStates, graded_table
from services.runtime.metrics import common_metrics
from services.runtime.outbox import Outbox
from services.runtime.regrades import read_regrade
from services.runtime.ticks import Deadlines

PROCESSOR = "gate"
SPEC = PROCESSORS[PROCESSOR]  # its topics and tables
SCENARIO_GRACE_S = 3.0
log = logging.getLogger(__name__)
settings = get_settings()
app = make_app(PROCESSOR, settings)
timing = domain.Timing(
    session_wait_s=settings.session_wait_s,
    orphan_ttl_s=max(10 * settings.session_wait_s, 3600.0),
    retention_s=settings.dedup_retention_s,
)

# --------------------------------------------------------------------------- topics
conversation_topic = topic_name(Topic.CONVERSATION_FINISHED, settings)
session_topic = topic_name(Topic.SESSION_PERSISTED, settings)
tick_topic = topic_name(Topic.GATE_TICKS, settings)
regrade_topic = topic_name(Topic.REGRADE_REQUESTS, settings)
inputs = raw_inputs(app, *SPEC.agents["join"], settings=settings)
ticks = raw_topic(app, Topic.GATE_TICKS, settings)
gate_results = raw_topic(app, Topic.GATE_RESULTS, settings)
judge_requests = raw_topic(app, Topic.JUDGE_REQUESTS, settings)
reject = DeadLetters(app, PROCESSOR, settings)
deliver = Delivery(PROCESSOR)  # re-grades: each awaited (rare, and apart from the batches)

# --------------------------------------------------------------------------- tables
# session_id -> JoinState (as JSON) plus its next due time, so the timer need not parse it.
# Only trials still pending live in RAM; graded ones are remembered on disk until the
# retention ends (services.runtime.graded), never ticked.
JOINS, GRADED = SPEC.tables
joins = app.Table(JOINS.name, default=None, partitions=settings.topic_partitions)
graded = graded_table(app, GRADED.name, settings)
catalog = ScenarioCatalog(settings)
deadlines = Deadlines(app, joins, ticks, settings, inputs=(conversation_topic, session_topic))
clock = deadlines.clock
run_alongside(app, settings, catalog)
metrics = GateMetrics()
common = common_metrics()


# A backlog's pending joins wait in the log, not in RAM (services.runtime.flow).
INPUT_OF = {"conversation": conversation_topic, "session": session_topic}
flow = join_flow(app, joins, (conversation_topic, session_topic), settings.join_max_pending,
                 waits_on=lambda state: INPUT_OF.get(domain.awaiting(state) or ""),
                 unread=lambda topic, p: not clock.caught_up(topic, p))
states = KeyedStates(joins, graded, deadlines.schedule,
                     marked_at=lambda state: state["graded_at"],
                     retention_s=settings.dedup_retention_s,
                     is_marker=domain.is_marker, due_at=lambda s: domain.due_at(s, timing),
                     on_pending=flow.note)
# A batch holds each key's newest state as a model: several records of one trial in a
# batch are parsed once and dumped (and changelogged) once.
outbox = Outbox(PROCESSOR, states.read, states.store)


def _load(key: str) -> domain.JoinState | None:
    held = outbox.get(key)
    if held is None or isinstance(held, domain.JoinState):
        return held
    return domain.JoinState.model_validate(held["state"])


def _store(key: str, decision: domain.Decision) -> None:
    outbox.put(key, decision.state)


def _unknown_scenario(scenario_id: str) -> Rejection:
    return Rejection(
        "unknown_scenario", f"scenario {scenario_id!r} is not published on the scenarios topic"
    )


async def _grade(event: faust.types.EventT, grade: domain.Grade) -> bool:
    conv = grade.conversation
    scenario = catalog.get(conv.scenario_id)
    if scenario is None:
        await reject(event, _unknown_scenario(conv.scenario_id))
        return False
    results = gates_for(conv, grade.session, scenario, waited_s=grade.waited_s)
    # Publish before recording the trial as graded: a crash in between re-grades it and
    # re-publishes the same event ids, which consumers drop; the reverse would lose it.
    # Sent now, awaited with the rest of the batch before its state is written (Outbox);
    # each is re-sent with backoff through an outage.
    for result in results:
        await outbox.send(gate_results, conv.trial_id.encode(), encode(result))
    if scenario.skips_judges_when_gates_fail(settings.judge_skip_when_gates_fail):
        # The judge grades this trial now that its gates are decided (and asks no model
        # when they failed): its conversation goes with the request.
        request = judge_request(conv, results)
        await outbox.send(judge_requests, conv.trial_id.encode(), encode(request))
    for result in results:
        metrics.count(result)
    if grade.session is None and scenario.has_state_gate:
        metrics.sessions_missing.inc()
    return True


def judge_request(conv: ConversationFinished, results: list[GateResult]) -> JudgeRequest:
    version = results[0].scenario_version
    return JudgeRequest(
        event_id=f"judge-request:{conv.trial_id}:{version}", trial_id=conv.trial_id,
        scenario_id=conv.scenario_id, scenario_version=version,
        gates_passed=all(r.passed for r in results),
        failed_gates=[r.gate for r in results if not r.passed], conversation=conv,
    )


def _in_future(occurred_at: datetime, broker_ts: float | None, now: float) -> Rejection | None:
    return in_future(occurred_at, reference_time(broker_ts, now), settings.max_clock_skew_s)


def _session_conflict(sess: SessionPersisted, owner: str | None) -> Rejection:
    return Rejection("session_conflict", (
        f"the persisted session {sess.session_id!r} names trial {sess.trial_id!r} "
        f"(run {sess.run_id!r}), but the session is joined to trial {owner!r}; it is not "
        "used for that trial"))


async def _refuse_held(event: faust.types.EventT, held: SessionPersisted, owner: str) -> None:
    """A SessionPersisted held before any conversation, naming another trial than the one
    whose conversation then claimed the session: dead-lettered as itself (its topic, its
    bytes), though the record being handled is the conversation."""
    record = dead_letter(processor=PROCESSOR, source_topic=session_topic,
                         partition=event.message.partition, offset=None,
                         key=held.session_id.encode(), value=encode(held),
                         rejection=_session_conflict(held, owner))
    await deliver(reject.topic, held.session_id.encode(), encode(record))
    common.dead_letters.labels(session_topic, "session_conflict").inc()
    common.events.labels(PROCESSOR, "session_conflict").inc()


# --------------------------------------------------------------------------- agents
@app.agent(inputs)
async def join(stream: faust.StreamT) -> None:
    await catalog.ready()
    await outbox.run(stream, lambda event: reject.guard(event, handle),
                     batch_max=settings.batch_max, within_s=settings.batch_within_s)


async def regrade(event: faust.types.EventT) -> None:
    """A re-grade carries its input events: graded at once, apart from the join table, so
    the memory of graded trials (which drops repeats of the inputs) does not drop it."""
    found = await read_regrade(event, catalog, reject, settings, grace_s=SCENARIO_GRACE_S)
    if found is None:
        return
    request, scenario = found
    results = regrade_gates(request, scenario, session_wait_s=settings.session_wait_s)
    await asyncio.gather(*(deliver(gate_results, request.trial_id.encode(), encode(result))
                           for result in results))
    common.events.labels(PROCESSOR, "regraded").inc()


async def handle(event: faust.types.EventT) -> None:
    message = event.message
    topic = message.topic
    if topic == regrade_topic:
        return await regrade(event)
    now = time.time()
    if topic != tick_topic:
        clock.observe(topic, message.partition, message.offset, message.timestamp)
    if topic == tick_topic:
        key = event.key.decode() if event.key else ""
        state = _load(key)
        if state is None:
            return
        # Deadlines run on how far the inputs have been read, not on the wall clock.
        stream_now = clock.now_for((conversation_topic, session_topic), message.partition)
        decision = domain.on_tick(state, stream_now, timing)
    elif topic == conversation_topic:
        conv = decode(event.value, ConversationFinished, max_bytes=settings.max_event_bytes,
                   max_depth=settings.max_json_depth)
        if isinstance(conv, Rejection):
            return await reject(event, conv)
        # No trial then: the judge refuses the same record (same reference time).
        if future := _in_future(conv.occurred_at, message.timestamp, now):
            return await reject(event, future)
        # A scenario published moments before its traffic may not have been read yet.
        scenario = catalog.get(conv.scenario_id) or await catalog.wait_for(
            conv.scenario_id, timeout=SCENARIO_GRACE_S)
        if scenario is None:
            return await reject(event, _unknown_scenario(conv.scenario_id))
        key = conv.session_id
        joined = _load(key)
        decision = domain.on_conversation(
            joined, conv, now, wait_for_session=scenario.has_state_gate
        )
        if decision.note == "session_conflict":
            common.events.labels(PROCESSOR, decision.note).inc()
            return await reject(event, Rejection("session_conflict", (
                f"trial {conv.trial_id!r} (run {conv.run_id!r}) claims session {key!r}, "
                f"already joined to trial {domain.joined_trial(joined)!r}; the first is "
                "graded, this one is not")))
        if decision.refused_session is not None:
            await _refuse_held(event, decision.refused_session, conv.trial_id)
    else:
        if len(event.value or b"") > settings.max_session_bytes:
            return await reject(event, Rejection("session_too_large", (
                f"{len(event.value)} bytes exceeds the session limit of "
                f"{settings.max_session_bytes} (PASSK_MAX_SESSION_BYTES)")))
        sess = decode(event.value, SessionPersisted, max_bytes=settings.max_event_bytes,
                   max_depth=settings.max_json_depth)
        if isinstance(sess, Rejection):
            return await reject(event, sess)
        # Its conversation, if any, then waits for a session as if none came.
        if future := _in_future(sess.occurred_at, message.timestamp, now):
            return await reject(event, future)
        key = sess.session_id
        joined = _load(key)
        decision = domain.on_session(joined, sess, now)
        if decision.note == "session_conflict":
            common.events.labels(PROCESSOR, decision.note).inc()
            return await reject(event, _session_conflict(sess, domain.claimed_by(joined)))

    common.events.labels(PROCESSOR, decision.note).inc()
    if decision.note == "orphan_expired":
        metrics.orphan_sessions.inc()
    if decision.grade is not None and not await _grade(event, decision.grade):
        return
    if decision.note in domain.STATE_CHANGES:
        _store(key, decision)


def build(settings):  # type: ignore[no-untyped-def]  # until its own build() lands
    return app
