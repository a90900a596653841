from __future__ import annotations

import pytest

from schemas.events import Message, TrialMetrics, count_turns
from services.gate.gates import exit_gate, state_gate
from tests.unit.factories import GOOD_STATE, conversation, scenario, session


def test_clean_trial_passes_both_gates() -> None:
    sc, conv = scenario(), conversation()
    exit_result = exit_gate(conv, sc)
    state_result = state_gate(conv, session(), sc, waited_s=0)
    assert exit_result.passed and state_result.passed
    assert exit_result.reasons == [] and state_result.reasons == []
    assert exit_result.event_id == f"gate:t1:exit:{sc.version}"
    assert state_result.scenario_version == sc.version
    assert exit_result.finished_at == conv.occurred_at and exit_result.agent_version == "1.2.3"


@pytest.mark.parametrize(
    ("expected_exit", "observed", "passed"),
    [
        ("product_closed", "product_closed", True),
        ("product_closed", "persona_exhausted", False),
        (["product_closed", "handed_off"], "handed_off", True),
        (["product_closed", "handed_off"], "max_turns", False),
    ],
)
def test_exit_must_be_one_of_the_expected(expected_exit, observed, passed) -> None:
    result = exit_gate(conversation(exit_reason=observed), scenario(expected_exit=expected_exit))
    assert result.passed is passed
    if not passed:
        assert observed in result.reasons[0]
        assert "not one of the expected exits" in result.reasons[0]


def test_turns_count_user_and_assistant_only() -> None:
    # system + tool messages are plumbing; the tool-call assistant message is still a turn
    assert count_turns(conversation().transcript) == 4


@pytest.mark.parametrize(("reported_turns", "passed"), [(6, True), (7, False), (None, True)])
def test_turn_limit_uses_reported_turns_else_counts(reported_turns, passed) -> None:
    conv = conversation(metrics=TrialMetrics(turns=reported_turns, duration_ms=1000))
    result = exit_gate(conv, scenario())
    assert result.passed is passed
    check = next(c for c in result.checks if c.check == "exit:max_turns")
    assert check.found == (reported_turns if reported_turns is not None else 4)


def test_counted_turns_over_limit_fail() -> None:
    many = [Message(role="user", content="hi"), Message(role="assistant", content="hello")] * 4
    result = exit_gate(
        conversation(transcript=many, metrics=TrialMetrics(duration_ms=10)), scenario()
    )
    assert not result.passed
    assert "8 turns (counted from the transcript) exceed the limit of 6" in result.reasons


@pytest.mark.parametrize(("duration_ms", "passed"), [(900_000, True), (900_001, False)])
def test_duration_limit(duration_ms, passed) -> None:
    conv = conversation(metrics=TrialMetrics(turns=2, duration_ms=duration_ms))
    assert exit_gate(conv, scenario()).passed is passed


def test_duration_limit_without_reported_duration_fails_with_that_reason() -> None:
    result = exit_gate(conversation(metrics=None), scenario())
    assert not result.passed
    assert any("reported no metrics.duration_ms" in r for r in result.reasons)


def test_no_limits_means_only_the_exit_is_checked() -> None:
    result = exit_gate(conversation(metrics=None), scenario(limits={}))
    assert result.passed and [c.check for c in result.checks] == ["exit:expected_exit"]


def test_missing_required_field_fails_state_gate_even_with_clean_close() -> None:
    state = {**GOOD_STATE, "report": {**GOOD_STATE["report"], "parts": []}}
    conv = conversation()
    assert exit_gate(conv, scenario()).passed
    result = state_gate(conv, session(state=state), scenario(), waited_s=0)
    assert not result.passed
    assert len(result.reasons) == 1 and "report.parts" in result.reasons[0]


def test_unexpected_follow_up_fails_state_gate() -> None:
    state = {**GOOD_STATE, "follow_up": {"when": "tomorrow"}}
    result = state_gate(conversation(), session(state=state), scenario(), waited_s=0)
    assert not result.passed and "follow_up" in result.reasons[0]


def test_billing_lines_in_any_order_pass() -> None:
    state = {**GOOD_STATE, "billability": list(reversed(GOOD_STATE["billability"]))}
    assert state_gate(conversation(), session(state=state), scenario(), waited_s=0).passed


def test_session_never_persisted_fails_the_state_gate_with_the_wait() -> None:
    result = state_gate(conversation(), None, scenario(), waited_s=120)
    assert not result.passed
    assert result.reasons == ["no persisted session within 120 s"]


def test_tool_calls_are_never_graded() -> None:
    conv = conversation()
    without_tools = conversation(
        transcript=[m for m in conv.transcript if m.role != "tool" and not m.tool_calls]
        + [Message(role="assistant", content="ok")]
    )
    sc = scenario()
    assert exit_gate(conv, sc).passed == exit_gate(without_tools, sc).passed
    assert state_gate(conv, session(), sc, waited_s=0).passed


def test_a_regrade_grades_its_request_under_its_attempt_with_new_ids() -> None:
    from schemas.events import RegradeRequest
    from services.gate.gates import gates_for, regrade_gates
    from tests.unit.factories import conversation, scenario, session

    sc = scenario()
    conv, sess = conversation("t9"), session("t9")
    request = RegradeRequest(
        event_id="regrade:t9:2",
        trial_id="t9",
        run_id=conv.run_id,
        scenario_id=sc.id,
        scenario_version=sc.version or "",
        session_id=conv.session_id,
        attempt=2,
        conversation=conv,
        session=sess,
    )
    first = gates_for(conv, sess, sc, waited_s=120)
    again = regrade_gates(request, sc, session_wait_s=120)
    assert [g.gate for g in again] == [g.gate for g in first]
    assert [g.passed for g in again] == [g.passed for g in first]
    assert all(g.attempt == 2 for g in again)
    assert [g.event_id for g in again] == [f"{g.event_id}:attempt-2" for g in first]
    # no session in the log: the state gate fails as a missing session, with the wait
    missing = regrade_gates(request.model_copy(update={"session": None}), sc, session_wait_s=120)
    state = next(g for g in missing if g.gate == "state")
    assert not state.passed and "no persisted session within 120 s" in state.reasons[0]


def test_gate_results_say_whether_a_production_trial_is_sampled() -> None:
    from services.gate.gates import gates_for
    from services.grading.sampling import in_sample

    sc = scenario(sampling={"llm_judges": 0.5}, exit_attribute="app.exit")
    ids = [f"{i:032x}" for i in range(40)]
    out_id = next(t for t in ids if not in_sample(t, 0.5))
    prod = conversation(out_id, production=True, exit_reason="unknown")
    results = gates_for(prod, session(), sc, waited_s=1)
    assert [r.sampled for r in results] == [False, False]
    assert "named no exit" in results[0].checks[0].reason and not results[0].passed
    assert all(r.sampled for r in gates_for(prod, session(), sc, waited_s=1, sample_rate=1.0))
    # a trial with passk ids is always sampled, whatever the rate
    assert all(r.sampled for r in gates_for(conversation(out_id), session(), sc, waited_s=1))
