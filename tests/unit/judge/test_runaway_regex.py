"""Patterns in scenarios run in linear time: `(a+)+$` against 5,000 characters, which Python's
backtracking `re` would not finish (its time doubles with each character), answers at once
in the judge and in the gate; patterns the linear-time engine cannot run are refused when
the scenario is validated."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.events import ConversationFinished, Message
from schemas.patterns import PatternError, compile_pattern
from schemas.scenario import Expectation, JudgeSpec
from services.gate.expectations import check_expectation
from services.grading import kinds
from services.judge.domain import deterministic_verdict
from tests.unit.factories import conversation, scenario

RUNAWAY = r"(a+)+$"
HOSTILE = "a" * 5000 + "!"


def test_a_catastrophic_pattern_in_a_regex_judge_answers() -> None:
    spec = JudgeSpec(id="j", kind="regex", pattern=RUNAWAY)
    decision = kinds.regex(spec, [Message(role="assistant", content=HOSTILE)])
    assert decision.passed is False and "matched no assistant message" in decision.reason
    matched = kinds.regex(spec, [Message(role="assistant", content="a" * 5000)])
    assert matched.passed is True


def test_a_catastrophic_pattern_in_a_matches_expectation_answers() -> None:
    exp = Expectation(path="note", matches=RUNAWAY)
    assert check_expectation(exp, {"note": HOSTILE}).passed is False
    assert check_expectation(exp, {"note": "a" * 5000}).passed is True


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        (r"(a)\1", "invalid escape sequence"),  # backreference
        (r"foo(?=bar)", "invalid perl operator"),  # lookahead
        (r"(unclosed", "missing )"),
    ],
)
def test_what_the_engine_cannot_run_is_refused_at_validation(pattern: str, says: str) -> None:
    with pytest.raises(PatternError, match="RE2"):
        compile_pattern(pattern)
    with pytest.raises(ValidationError) as judge_error:
        kinds.RegexParams(pattern=pattern)
    assert says in str(judge_error.value) and "RE2" in str(judge_error.value)
    with pytest.raises(ValidationError) as exp_error:
        Expectation(path="a", matches=pattern)
    assert says in str(exp_error.value)


def test_a_kind_that_raises_is_an_error_verdict_not_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(spec: JudgeSpec, transcript: object) -> kinds.Decision:
        raise MemoryError("out of memory")

    monkeypatch.setitem(kinds._KINDS, "regex", broken)
    spec = JudgeSpec(id="j", kind="regex", pattern="x")
    sc = scenario(judges=[spec.model_dump()])
    trial: ConversationFinished = conversation()
    verdict = deterministic_verdict(trial, sc, sc.judges[0])
    assert verdict.result == "error"
    assert "judge_failed" in verdict.reason and "MemoryError" in verdict.reason
