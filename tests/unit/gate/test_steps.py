"""The gate's steps over fakes of its ports (tests/unit/join_fakes.py): what each record
leads to — what is sent, in which order with the state stored, what is dead-lettered and
why, what is counted. (Against the broker: tests/integration/test_gate_verdict.py.)"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from schemas.events import ConversationFinished, GateResult, JudgeRequest, RegradeRequest
from services.contract.codec import encode
from services.gate import domain
from services.gate.metrics import GateMetrics
from services.gate.steps import Steps
from services.runtime.metrics import CommonMetrics
from tests.unit.factories import conversation, scenario, session
from tests.unit.fakes import default_settings
from tests.unit.join_fakes import (
    FakeCatalog,
    FakeDeadLetters,
    FakeDelivery,
    FakeJoin,
    Log,
    record,
)

CONV, SESS, REGRADE = "p.conversation-finished", "p.session-persisted", "p.regrade-requests"
TIMING = domain.Timing(session_wait_s=10, orphan_ttl_s=100, retention_s=1000)


class Gate:
    """The steps with their fakes, and what they did."""

    def __init__(self, *scenarios: Any, **settings: Any) -> None:
        self.log = Log()
        self.settings = default_settings(**settings)
        self.registry = CollectorRegistry()
        self.reject = FakeDeadLetters(self.log, "gate", self.settings)
        catalog = FakeCatalog(*(scenarios or (scenario(),)))
        self.join = FakeJoin(self.log, catalog, self.reject)
        self.steps = Steps(
            self.settings,
            TIMING,
            self.join,
            deliver=FakeDelivery(self.log),
            gate_results="gate-results",
            judge_requests="judge-requests",
            session_topic=SESS,
            metrics=GateMetrics(self.registry),
            common=CommonMetrics(self.registry),
        )

    def count(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def events(self, note: str) -> float:
        return self.count("passk_events_total", processor="gate", note=note)

    def sent(self, topic: str = "gate-results") -> list[Any]:
        return [json.loads(value) for t, _, value in self.log.of("send") if t == topic]


async def test_a_conversation_waits_for_its_session_then_both_gates_are_sent_before_the_store() -> (
    None
):
    gate = Gate()
    await gate.steps.on_conversation(record(CONV, encode(conversation("t1"))))
    assert gate.log.kinds() == ["store"]  # waiting: stored, nothing sent
    assert gate.events("waiting") == 1
    await gate.steps.on_session(record(SESS, encode(session("t1"))))
    assert gate.log.kinds() == ["store", "send", "send", "store"]
    assert sorted(r["gate"] for r in gate.sent()) == ["exit", "state"]
    assert all(r["trial_id"] == "t1" and r["passed"] for r in gate.sent())
    key, graded = gate.log.of("store")[-1]
    assert key == "s-t1" and graded.graded_trial_ids == ["t1"]
    assert gate.count("passk_gate_results_total", gate="state", result="passed") == 1
    assert gate.events("graded") == 1


async def test_a_repeated_conversation_after_grading_sends_nothing() -> None:
    gate = Gate()
    await gate.steps.on_conversation(record(CONV, encode(conversation("t1"))))
    await gate.steps.on_session(record(SESS, encode(session("t1"))))
    before = list(gate.log.entries)
    await gate.steps.on_conversation(record(CONV, encode(conversation("t1")), offset=8))
    assert gate.log.entries == before
    assert gate.events("duplicate") == 1


async def test_an_undecodable_conversation_is_a_dead_letter_and_nothing_else() -> None:
    gate = Gate()
    bad = record(CONV, b"{not json")
    await gate.steps.on_conversation(bad)
    assert gate.log.kinds() == ["reject"]
    ((event, rejection),) = gate.log.of("reject")
    assert event is bad and rejection.reason == "invalid_json"


async def test_a_session_over_the_limit_is_refused_before_it_is_read() -> None:
    gate = Gate(PASSK_MAX_SESSION_BYTES=100)
    big = encode(session("t1", state={"notes": "x" * 200}))
    await gate.steps.on_session(record(SESS, big))
    assert gate.log.reasons() == ["session_too_large"]
    assert gate.join.states == {}


async def test_a_conversation_from_the_future_is_refused_and_not_joined() -> None:
    gate = Gate()
    ahead = conversation("t1", occurred_at=datetime.now(UTC) + timedelta(hours=1))
    await gate.steps.on_conversation(record(CONV, encode(ahead)))
    assert gate.log.reasons() == ["occurred_at_in_future"]
    assert gate.join.states == {}


async def test_a_conversation_of_an_unpublished_scenario_is_refused() -> None:
    gate = Gate()
    await gate.steps.on_conversation(record(CONV, encode(conversation("t1", scenario_id="nope"))))
    assert gate.log.reasons() == ["unknown_scenario"]
    assert gate.join.states == {}


async def test_a_second_trial_claiming_a_pending_session_is_refused_the_first_kept() -> None:
    gate = Gate()
    await gate.steps.on_conversation(record(CONV, encode(conversation("t1"))))
    other = conversation("t2", session_id="s-t1")
    await gate.steps.on_conversation(record(CONV, encode(other)))
    assert gate.log.kinds() == ["store", "reject"]
    assert gate.log.reasons() == ["session_conflict"]
    assert gate.join.states["s-t1"].conversation.trial_id == "t1"
    assert gate.events("session_conflict") == 1


async def test_a_held_session_of_another_trial_is_dead_lettered_as_itself() -> None:
    gate = Gate()
    held = session("t1", trial_id="t9")  # names t9, but session s-t1 is t1's
    await gate.steps.on_session(record(SESS, encode(held)))
    await gate.steps.on_conversation(record(CONV, encode(conversation("t1")), partition=2))
    ((topic, key, value),) = gate.log.of("deliver")
    letter = json.loads(value)
    assert topic == "dead-letters" and key == b"s-t1"
    assert (letter["source_topic"], letter["partition"], letter["offset"]) == (SESS, 2, None)
    assert letter["reason"] == "session_conflict" and letter["processor"] == "gate"
    assert gate.count("passk_dead_letters_total", topic=SESS, reason="session_conflict") == 1
    # the conversation still waits for its own session; nothing graded
    assert gate.log.of("send") == []
    assert gate.join.states["s-t1"].session is None


async def test_a_tick_past_the_wait_grades_without_a_session_and_counts_it_missing() -> None:
    gate = Gate()
    await gate.steps.on_conversation(record(CONV, encode(conversation("t1"))))
    ((_, waiting),) = gate.log.of("store")
    tick = record("p.gate-ticks", None, key=b"s-t1")
    await gate.steps.on_tick(tick, "s-t1", waiting, time.time() + TIMING.session_wait_s + 1)
    assert gate.log.kinds() == ["store", "send", "send", "store"]
    state = next(r for r in gate.sent() if r["gate"] == "state")
    assert not state["passed"]
    assert gate.count("passk_gate_sessions_missing_total") == 1
    assert gate.log.of("store")[-1][1].graded_without_session


async def test_an_expired_orphan_session_is_forgotten_and_counted() -> None:
    gate = Gate()
    await gate.steps.on_session(record(SESS, encode(session("t1"))))
    ((_, held),) = gate.log.of("store")
    await gate.steps.on_tick(
        record("p.gate-ticks", None), "s-t1", held, time.time() + TIMING.orphan_ttl_s + 1
    )
    assert gate.log.of("store")[-1] == ("s-t1", None)
    assert gate.count("passk_gate_orphan_sessions_total") == 1


async def test_a_scenario_whose_judges_wait_for_the_gates_gets_a_judge_request() -> None:
    gate = Gate(scenario(judging={"skip_when_gates_fail": True}))
    await gate.steps.on_conversation(record(CONV, encode(conversation("t1"))))
    await gate.steps.on_session(record(SESS, encode(session("t1"))))
    (request,) = gate.sent("judge-requests")
    assert JudgeRequest.model_validate(request).trial_id == "t1"
    assert gate.log.kinds()[-1] == "store"  # after the judge request too


async def test_a_regrade_is_delivered_at_once_and_leaves_the_join_alone() -> None:
    sc = scenario()
    gate = Gate(sc)
    conv: ConversationFinished = conversation("t1")
    request = RegradeRequest(
        event_id="regrade:t1:2",
        trial_id="t1",
        run_id=conv.run_id,
        scenario_id=sc.id,
        scenario_version=sc.version or "",
        session_id=conv.session_id,
        attempt=2,
        conversation=conv,
        session=session("t1"),
    )
    await gate.steps.regrade(record(REGRADE, encode(request)))
    delivered = [GateResult.model_validate_json(v) for _, _, v in gate.log.of("deliver")]
    assert sorted(r.gate for r in delivered) == ["exit", "state"]
    assert all(r.attempt == 2 for r in delivered)
    assert {topic for topic, _, _ in gate.log.of("deliver")} == {"gate-results"}
    assert gate.log.of("send") == [] and gate.log.of("store") == []
    assert gate.events("regraded") == 1


async def test_a_regrade_of_an_unpublished_version_is_a_dead_letter() -> None:
    gate = Gate()
    conv = conversation("t1")
    request = RegradeRequest(
        event_id="regrade:t1:2",
        trial_id="t1",
        run_id=conv.run_id,
        scenario_id=conv.scenario_id,
        scenario_version="never",
        session_id=conv.session_id,
        attempt=2,
        conversation=conv,
    )
    await gate.steps.regrade(record(REGRADE, encode(request)))
    assert gate.log.kinds() == ["reject"]
    assert gate.log.reasons() == ["unknown_scenario_version"]


async def test_a_pinned_conversation_is_graded_against_its_version_not_the_latest() -> None:
    old = scenario()
    new = scenario(expected_exit="handed_off")  # published later: the latest
    assert old.version != new.version
    gate = Gate(old, new)
    pinned = conversation("t1", scenario_version=old.version)
    await gate.steps.on_conversation(record(CONV, encode(pinned)))
    await gate.steps.on_session(record(SESS, encode(session("t1"))))
    assert {r["scenario_version"] for r in gate.sent()} == {old.version}
    assert all(r["passed"] for r in gate.sent())  # the old expected exit, product_closed


async def test_a_conversation_pinned_to_a_version_never_published_is_refused() -> None:
    gate = Gate()
    await gate.steps.on_conversation(
        record(CONV, encode(conversation("t1", scenario_version="0123456789abcdef")))
    )
    assert gate.log.reasons() == ["unknown_scenario_version"]
    assert "'0123456789abcdef'" in gate.reject.sent[0][1].detail
    assert gate.join.states == {} and gate.sent() == []
