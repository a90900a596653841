"""Gate processor wiring: join conversation-finished and session-persisted by session_id,
grade both gates, publish one GateResult per gate. The join is services/runtime/keyed_join.py;
the logic, domain.py and gates.py."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

import faust
from prometheus_client import REGISTRY, CollectorRegistry

from schemas.events import ConversationFinished, SessionPersisted
from services.contract.codec import Rejection, encode
from services.contract.deadletter import dead_letter
from services.contract.eventtime import in_future, reference_time
from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.gate import domain
from services.gate.gates import gates_for, judge_request, regrade_gates
from services.gate.metrics import GateMetrics
from services.kafka.catalog import unknown_scenario
from services.runtime.app import Delivery, make_app, raw_topic, run_alongside
from services.runtime.keyed_join import KeyedJoin
from services.runtime.metrics import common_metrics
from services.runtime.regrades import read_regrade

PROCESSOR = "gate"
SPEC = PROCESSORS[PROCESSOR]  # its topics and tables


def build(settings: Settings, registry: CollectorRegistry = REGISTRY) -> faust.App:
    """(`registry`: where its own counters are registered; a second build in one
    process needs another.)"""
    app = make_app(PROCESSOR, settings)
    timing = domain.Timing(session_wait_s=settings.session_wait_s,
                           orphan_ttl_s=max(10 * settings.session_wait_s, 3600.0),
                           retention_s=settings.dedup_retention_s)
    # session_id -> the join while pending (RAM), then its graded marker (on disk)
    join = KeyedJoin(app, SPEC, settings, state=domain.JoinState,
                     roles=("conversation", "session"), marked_at="graded_at",
                     awaiting=domain.awaiting, due_at=lambda s: domain.due_at(s, timing),
                     is_marker=domain.is_marker)
    catalog, reject = join.catalog, join.reject
    run_alongside(app, settings, catalog)
    gate_results = raw_topic(app, Topic.GATE_RESULTS, settings)
    judge_requests = raw_topic(app, Topic.JUDGE_REQUESTS, settings)
    session_topic = topic_name(Topic.SESSION_PERSISTED, settings)
    deliver = Delivery(PROCESSOR)  # re-grades: each awaited (rare, and apart from the batches)
    metrics, common = GateMetrics(registry), common_metrics()

    def future(event: faust.types.EventT, occurred_at: datetime, now: float) -> Rejection | None:
        # No trial then: the judge refuses the same record (same reference time).
        return in_future(occurred_at, reference_time(event.message.timestamp, now),
                         settings.max_clock_skew_s)

    async def grade(event: faust.types.EventT, grade: domain.Grade) -> bool:
        conv = grade.conversation
        scenario = catalog.get(conv.scenario_id)
        if scenario is None:
            await reject(event, unknown_scenario(conv.scenario_id))
            return False
        results = gates_for(conv, grade.session, scenario, waited_s=grade.waited_s)
        # Published before the trial is recorded as graded (the join's Outbox): a crash in
        # between re-publishes the same event ids, which consumers drop.
        for result in results:
            await join.send(gate_results, conv.trial_id, encode(result))
        if scenario.skips_judges_when_gates_fail(settings.judge_skip_when_gates_fail):
            # The judge grades it now its gates are decided (no model asked if they failed).
            await join.send(judge_requests, conv.trial_id, encode(judge_request(conv, results)))
        for result in results:
            metrics.count(result)
        if grade.session is None and scenario.has_state_gate:
            metrics.sessions_missing.inc()
        return True

    async def settle(event: faust.types.EventT, key: str, decision: domain.Decision) -> None:
        common.events.labels(PROCESSOR, decision.note).inc()
        if decision.note == "orphan_expired":
            metrics.orphan_sessions.inc()
        if decision.grade is not None and not await grade(event, decision.grade):
            return
        if decision.note in domain.STATE_CHANGES:
            join.store(key, decision.state)

    async def refuse(event: faust.types.EventT, decision: domain.Decision,
                     why: Rejection) -> None:
        common.events.labels(PROCESSOR, decision.note).inc()
        await reject(event, why)

    async def on_conversation(event: faust.types.EventT) -> None:
        now = time.time()
        conv = await join.decoded(event, ConversationFinished)
        if conv is None:
            return
        if late := future(event, conv.occurred_at, now):
            return await reject(event, late)
        if (scenario := await join.scenario(event, conv.scenario_id)) is None:
            return
        joined = join.load(conv.session_id)
        decision = domain.on_conversation(joined, conv, now,
                                          wait_for_session=scenario.has_state_gate)
        if decision.note == "session_conflict":
            return await refuse(event, decision, domain.conversation_conflict(conv, joined))
        if decision.refused_session is not None:
            await refuse_held(event, decision.refused_session, conv.trial_id)
        await settle(event, conv.session_id, decision)

    async def on_session(event: faust.types.EventT) -> None:
        now = time.time()
        if len(event.value or b"") > settings.max_session_bytes:
            return await reject(event, domain.session_too_large(
                len(event.value), settings.max_session_bytes))
        sess = await join.decoded(event, SessionPersisted)
        if sess is None:
            return
        # Its conversation, if any, then waits for a session as if none came.
        if late := future(event, sess.occurred_at, now):
            return await reject(event, late)
        joined = join.load(sess.session_id)
        decision = domain.on_session(joined, sess, now)
        if decision.note == "session_conflict":
            return await refuse(event, decision,
                                domain.session_conflict(sess, domain.claimed_by(joined)))
        await settle(event, sess.session_id, decision)

    async def refuse_held(event: faust.types.EventT, held: SessionPersisted, owner: str) -> None:
        """A SessionPersisted held before any conversation, naming another trial than the
        one whose conversation then claimed the session: dead-lettered as itself (its topic,
        its bytes), though the record being handled is the conversation."""
        record = dead_letter(processor=PROCESSOR, source_topic=session_topic,
                             partition=event.message.partition, offset=None,
                             key=held.session_id.encode(), value=encode(held),
                             rejection=domain.session_conflict(held, owner))
        await deliver(reject.topic, held.session_id.encode(), encode(record))
        common.dead_letters.labels(session_topic, "session_conflict").inc()
        common.events.labels(PROCESSOR, "session_conflict").inc()

    async def regrade(event: faust.types.EventT) -> None:
        """A re-grade carries its input events: graded at once, apart from the join table,
        so the memory of graded trials (which drops repeats of the inputs) does not drop it."""
        if (found := await read_regrade(event, catalog, reject, settings)) is None:
            return
        request, scenario = found
        results = regrade_gates(request, scenario, session_wait_s=settings.session_wait_s)
        await asyncio.gather(*(deliver(gate_results, request.trial_id.encode(), encode(r))
                               for r in results))
        common.events.labels(PROCESSOR, "regraded").inc()

    async def on_tick(event: faust.types.EventT, key: str, state: domain.JoinState,
                      now: float) -> None:
        await settle(event, key, domain.on_tick(state, now, timing))

    join.agent("join", on_input={Topic.CONVERSATION_FINISHED: on_conversation,
                                 Topic.SESSION_PERSISTED: on_session},
               on_tick=on_tick, apart={Topic.REGRADE_REQUESTS: regrade})
    return app
