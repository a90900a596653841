from __future__ import annotations

import pytest

from schemas.events import ConversationFinished, Message
from schemas.scenario import JudgeSpec, Scenario
from services.judge import domain
from services.judge.domain import CachedAnswer, CallResult
from services.judge.prompt import PROMPT_HASH, Answer

SCENARIO = Scenario(
    id="debrief",
    expected_exit=["product_closed"],
    judges=[
        JudgeSpec(id="asked_parts", assertion="The agent asked which parts were used."),
        JudgeSpec(
            id="no_apology", kind="regex", pattern="(?i)sorry", must_match=False, gating=False
        ),
        JudgeSpec(id="mystery", kind="no_such_kind"),
        JudgeSpec(id="broken", kind="regex", pattern="("),
    ],
).versioned()
TRIAL = ConversationFinished(
    event_id="e1",
    run_id="r1",
    scenario_id="debrief",
    trial_id="t1",
    session_id="s1",
    exit_reason="product_closed",
    transcript=[Message(role="user", content="Hi"), Message(role="assistant", content="Sorry!")],
)


def judge(judge_id: str) -> JudgeSpec:
    return next(j for j in SCENARIO.judges if j.id == judge_id)


def test_event_id_is_deterministic_per_trial_judge_and_version() -> None:
    v = domain.make_verdict(TRIAL, SCENARIO, judge("asked_parts"), result="passed", reason="r")
    assert v.event_id == f"judge:t1:asked_parts:{SCENARIO.version}"
    assert v.scenario_version == SCENARIO.version
    assert (v.trial_id, v.run_id, v.session_id, v.scenario_id) == ("t1", "r1", "s1", "debrief")


def test_deterministic_verdict_records_its_spec_and_makes_no_call() -> None:
    v = domain.deterministic_verdict(TRIAL, SCENARIO, judge("no_apology"))
    assert v.result == "failed" and "must not match" in v.reason
    assert v.judge_kind == "regex" and v.gating is False
    assert v.judge_spec == {
        "id": "no_apology",
        "kind": "regex",
        "assertion": None,
        "gating": False,
        "dimension": None,
        "pattern": "(?i)sorry",
        "must_match": False,
    }
    assert v.model is None and v.attempts == 0 and v.input_tokens is None


@pytest.mark.parametrize(
    ("judge_id", "cause"), [("mystery", "unknown_judge_kind"), ("broken", "invalid_judge_spec")]
)
def test_a_judge_that_cannot_run_is_an_error_not_a_pass(judge_id: str, cause: str) -> None:
    v = domain.deterministic_verdict(TRIAL, SCENARIO, judge(judge_id))
    assert v.result == "error" and v.reason.startswith(f"{cause}: ")


def call(answer: Answer | None, cause: str | None = None) -> CallResult:
    return CallResult(answer, cause, "detail", 3, 212.5, 120, 14, "passk-standin")


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (call(Answer(passed=True, reason="asked")), "passed"),
        (call(Answer(passed=False, reason="never asked")), "failed"),
        (call(None, "rate_limited"), "error"),
        (call(None, "malformed_answer"), "error"),
        (call(None, "timeout"), "error"),
    ],
)
def test_llm_verdict(result: CallResult, expected: str) -> None:
    v = domain.llm_verdict(TRIAL, SCENARIO, judge("asked_parts"), result)
    assert v.result == expected and v.passed is (expected == "passed")
    assert (v.model, v.prompt_hash, v.attempts) == ("passk-standin", PROMPT_HASH, 3)
    assert (v.latency_ms, v.input_tokens, v.output_tokens, v.cached) == (212.5, 120, 14, False)
    if expected == "error":
        assert v.reason == f"{result.cause}: detail"


@pytest.mark.parametrize(("passed", "result"), [(True, "passed"), (False, "failed")])
def test_an_answered_verdict_passes_or_fails_with_its_reason(passed: bool, result: str) -> None:
    v = domain.answered_verdict(
        TRIAL, SCENARIO, judge("asked_parts"), passed=passed, reason="because", model="m"
    )
    assert (v.result, v.reason, v.model, v.judge_id) == (result, "because", "m", "asked_parts")


def test_cached_verdict_spends_nothing() -> None:
    hit = CachedAnswer(False, "never asked", "passk-standin", 100, 10)
    v = domain.cached_verdict(TRIAL, SCENARIO, judge("asked_parts"), hit)
    assert (v.result, v.reason, v.cached, v.attempts) == ("failed", "never asked", True, 0)
    assert v.input_tokens is None and v.model == "passk-standin"


def test_not_configured_is_an_error() -> None:
    v = domain.not_configured_verdict(TRIAL, SCENARIO, judge("asked_parts"))
    assert v.result == "error" and v.reason.startswith("not_configured: ")


def test_a_regrade_stamps_its_attempt_and_new_ids_on_the_same_judgements() -> None:
    from services.judge.domain import deterministic_verdict, for_attempt
    from tests.unit.factories import conversation, scenario

    sc = scenario()
    spec = next(iter(sc.judges))
    first = deterministic_verdict(conversation("t3"), sc, spec)
    (again,) = for_attempt([first], 3)
    assert again.attempt == 3 and first.attempt == 1
    assert again.event_id == first.event_id + ":attempt-3"
    assert (again.result, again.reason) == (first.result, first.reason)
