"""What the gate does with each record the keyed join hands it: a conversation or a persisted
session (joined by session_id), a tick of a pending session's deadline, a re-grade request.
The decisions are domain.py's and gates.py's; this sends what they decide, refuses what they
refuse and counts it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import KW_ONLY, dataclass
from datetime import datetime

from schemas.events import ConversationFinished, SessionPersisted
from services.contract.codec import Rejection, encode
from services.contract.deadletter import dead_letter
from services.contract.eventtime import in_future, reference_time
from services.contract.settings import Settings
from services.gate import domain
from services.gate.gates import gates_for, judge_request, regrade_gates
from services.gate.metrics import GateMetrics
from services.kafka.catalog import unknown_scenario
from services.runtime.app import Delivery, OutputTopic, Record
from services.runtime.keyed_join import JoinSteps, KeyedJoin
from services.runtime.metrics import CommonMetrics
from services.runtime.regrades import read_regrade


@dataclass
class Steps(JoinSteps):
    settings: Settings
    timing: domain.Timing
    join: KeyedJoin[domain.JoinState]
    _: KW_ONLY
    deliver: Delivery  # re-grades: each awaited (rare, and apart from the batches)
    gate_results: OutputTopic
    judge_requests: OutputTopic
    session_topic: str  # where a held session that is refused came from
    metrics: GateMetrics
    common: CommonMetrics

    # ------------------------------------------------------------------ the joined inputs
    async def on_conversation(self, event: Record) -> None:
        now = time.time()
        conv = await self.join.decoded(event, ConversationFinished)
        if conv is None:
            return
        if late := self._future(event, conv.occurred_at, now):
            return await self.reject(event, late)
        # The version the trial was run against, when it names one (pinned): never a later.
        if (
            scenario := await self.join.scenario(event, conv.scenario_id, conv.scenario_version)
        ) is None:
            return
        joined = self.join.load(conv.session_id)
        decision = domain.on_conversation(
            joined, conv, now, wait_for_session=scenario.has_state_gate
        )
        if decision.note == "session_conflict":
            return await self._refuse(event, decision, domain.conversation_conflict(conv, joined))
        if decision.refused_session is not None:
            await self._refuse_held(event, decision.refused_session, conv.trial_id)
        await self._settle(event, conv.session_id, decision)

    async def on_session(self, event: Record) -> None:
        now = time.time()
        if len(event.value or b"") > self.settings.max_session_bytes:
            return await self.reject(
                event, domain.session_too_large(len(event.value), self.settings.max_session_bytes)
            )
        sess = await self.join.decoded(event, SessionPersisted)
        if sess is None:
            return
        # Its conversation, if any, then waits for a session as if none came.
        if late := self._future(event, sess.occurred_at, now):
            return await self.reject(event, late)
        joined = self.join.load(sess.session_id)
        decision = domain.on_session(joined, sess, now)
        if decision.note == "session_conflict":
            return await self._refuse(
                event, decision, domain.session_conflict(sess, domain.claimed_by(joined))
            )
        await self._settle(event, sess.session_id, decision)

    async def on_tick(self, event: Record, key: str, state: domain.JoinState, now: float) -> None:
        await self._settle(event, key, domain.on_tick(state, now, self.timing))

    # ------------------------------------------------------------------ apart from the join
    async def regrade(self, event: Record) -> None:
        """A re-grade carries its input events: graded at once, apart from the join table,
        so the memory of graded trials (which drops repeats of the inputs) does not drop it."""
        if (found := await read_regrade(event, self.catalog, self.reject, self.settings)) is None:
            return
        request, scenario = found
        results = regrade_gates(request, scenario, session_wait_s=self.settings.session_wait_s)
        await asyncio.gather(
            *(
                self.deliver(self.gate_results, request.trial_id.encode(), encode(r))
                for r in results
            )
        )
        self.common.events.labels(self.processor, "regraded").inc()

    # ------------------------------------------------------------------ what a decision does
    def _future(self, event: Record, occurred_at: datetime, now: float) -> Rejection | None:
        # No trial then: the judge refuses the same record (same reference time).
        return in_future(
            occurred_at,
            reference_time(event.message.timestamp, now),
            self.settings.max_clock_skew_s,
        )

    async def _grade(self, event: Record, grade: domain.Grade) -> bool:
        conv = grade.conversation
        scenario = self.catalog.get(conv.scenario_id, conv.scenario_version)
        if scenario is None:
            await self.reject(event, unknown_scenario(conv.scenario_id, conv.scenario_version))
            return False
        results = gates_for(conv, grade.session, scenario, waited_s=grade.waited_s)
        # Published before the trial is recorded as graded (the join's Outbox): a crash in
        # between re-publishes the same event ids, which consumers drop.
        for result in results:
            await self.join.send(self.gate_results, conv.trial_id, encode(result))
        if scenario.skips_judges_when_gates_fail(self.settings.judge_skip_when_gates_fail) and (
            results[0].sampled
        ):  # an unsampled trial's judge runs no model anyway
            # The judge grades it now its gates are decided (no model asked if they failed).
            await self.join.send(
                self.judge_requests, conv.trial_id, encode(judge_request(conv, results))
            )
        for result in results:
            self.metrics.count(result)
        if grade.session is None and scenario.has_state_gate:
            self.metrics.sessions_missing.inc()
        return True

    async def _settle(self, event: Record, key: str, decision: domain.Decision) -> None:
        self.common.events.labels(self.processor, decision.note).inc()
        if decision.note == "orphan_expired":
            self.metrics.orphan_sessions.inc()
        if decision.grade is not None and not await self._grade(event, decision.grade):
            return
        if decision.note in domain.STATE_CHANGES:
            self.join.store(key, decision.state)

    async def _refuse(self, event: Record, decision: domain.Decision, why: Rejection) -> None:
        self.common.events.labels(self.processor, decision.note).inc()
        await self.reject(event, why)

    async def _refuse_held(self, event: Record, held: SessionPersisted, owner: str) -> None:
        """A SessionPersisted held before any conversation, naming another trial than the
        one whose conversation then claimed the session: dead-lettered as itself (its topic,
        its bytes), though the record being handled is the conversation."""
        record = dead_letter(
            processor=self.processor,
            source_topic=self.session_topic,
            partition=event.message.partition,
            offset=None,
            key=held.session_id.encode(),
            value=encode(held),
            rejection=domain.session_conflict(held, owner),
        )
        await self.deliver(self.reject.topic, held.session_id.encode(), encode(record))
        self.common.dead_letters.labels(self.session_topic, "session_conflict").inc()
        self.common.events.labels(self.processor, "session_conflict").inc()
