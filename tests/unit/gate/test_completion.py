"""Product-owned exits and scenarios without product-owned completion (DESIGN.md)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.gate import domain
from services.gate.gates import exit_gate, gates_for
from tests.unit.factories import conversation, scenario, session

CONVERSATION_ONLY = {"completion": "conversation", "outcome": []}


def test_the_exit_the_product_persisted_wins_over_the_harness() -> None:
    # The harness saw a clean close; the product recorded that the persona gave up.
    conv = conversation(exit_reason="product_closed")
    result = exit_gate(conv, scenario(), session(exit_reason="persona_exhausted"))
    assert not result.passed
    assert result.exit_source == "session" and result.exit_reason == "persona_exhausted"
    reason = result.reasons[0]
    assert "persona_exhausted" in reason and "recorded by the product" in reason
    assert "the harness saw 'product_closed'" in result.reasons[0]


def test_the_product_closing_passes_even_when_the_harness_saw_otherwise() -> None:
    conv = conversation(exit_reason="persona_exhausted")
    result = exit_gate(conv, scenario(), session(exit_reason="product_closed"))
    assert result.passed and result.exit_source == "session"


@pytest.mark.parametrize("sess", [None, session()])
def test_without_a_product_exit_the_harness_exit_is_checked(sess) -> None:
    result = exit_gate(conversation(exit_reason="persona_exhausted"), scenario(), sess)
    assert not result.passed
    assert result.exit_source == "harness" and result.exit_reason == "persona_exhausted"
    assert "observed by the harness" in result.reasons[0]


def test_product_completion_grades_both_gates() -> None:
    results = gates_for(conversation(), session(), scenario(), waited_s=0)
    assert [r.gate for r in results] == ["exit", "state"]
    assert {r.completion for r in results} == {"product"}


def test_conversation_completion_grades_the_exit_gate_only() -> None:
    sc = scenario(**CONVERSATION_ONLY)
    results = gates_for(conversation(), None, sc, waited_s=0)
    assert [(r.gate, r.passed, r.completion) for r in results] == [("exit", True, "conversation")]


def test_conversation_completion_still_fails_on_the_exit() -> None:
    sc = scenario(**CONVERSATION_ONLY)
    [result] = gates_for(conversation(exit_reason="max_turns"), None, sc, waited_s=0)
    assert not result.passed


def test_a_conversation_completion_trial_is_graded_at_once_without_a_session() -> None:
    decision = domain.on_conversation(None, conversation(), now=0, wait_for_session=False)
    assert decision.note == "graded" and decision.grade is not None
    assert decision.grade.session is None


def test_a_product_completion_trial_waits_for_its_session() -> None:
    decision = domain.on_conversation(None, conversation(), now=0, wait_for_session=True)
    assert decision.note == "waiting" and decision.grade is None


def test_outcome_expectations_need_product_completion() -> None:
    with pytest.raises(ValidationError, match="outcome expectations need completion: product"):
        scenario(completion="conversation")


def test_the_default_completion_keeps_published_versions() -> None:
    # Versions published before `completion` existed must not change.
    assert scenario().version == scenario(completion="product").version
    assert scenario(**CONVERSATION_ONLY).version != scenario(outcome=[]).version
