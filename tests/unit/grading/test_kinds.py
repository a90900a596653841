from __future__ import annotations

from typing import Any

import pytest

from schemas.events import Message
from schemas.scenario import JudgeSpec
from services.grading import kinds
from services.grading.kinds import InvalidJudgeSpec, judge_kind, known_kinds

TRANSCRIPT = [
    Message(role="system", content="You are a field-service debrief agent."),
    Message(role="user", content="I replaced the pump."),
    Message(role="assistant", content="Which part number did you use?"),
    Message(role="tool", content='{"part": "PUMP-7"}'),
    Message(role="assistant", content=None, tool_calls=[{"id": "c1", "type": "function"}]),
    Message(role="assistant", content="Thanks, the report is saved."),
]


def regex(**params: Any) -> JudgeSpec:
    return JudgeSpec(id="j", kind="regex", **params)


@pytest.mark.parametrize(
    ("params", "passed", "in_reason"),
    [
        ({"pattern": r"part number"}, True, "assistant message 2"),
        ({"pattern": r"(?i)REPORT IS SAVED"}, True, "message 5"),
        ({"pattern": r"pump"}, False, "matched no assistant message"),  # only in user's turn
        ({"pattern": r"pump", "role": "user"}, True, "user message 1"),
        ({"pattern": r"PUMP-7", "role": "any"}, True, "tool message 3"),
        ({"pattern": r"sorry|apolog", "must_match": False}, True, "as required"),
        ({"pattern": r"report", "must_match": False}, False, "must not match"),
        ({"pattern": r"debrief", "role": "system", "must_match": False}, False, "system message 0"),
    ],
)
def test_regex_kind(params: dict[str, Any], passed: bool, in_reason: str) -> None:
    decision = kinds.regex(regex(**params), TRANSCRIPT)
    assert decision.passed is passed
    assert in_reason in decision.reason


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({}, "pattern"),
        ({"pattern": "("}, "not a valid regular expression"),
        ({"pattern": "x", "role": "robot"}, "role"),
        ({"pattern": "x", "must_match": "yes"}, "must_match"),
        ({"pattern": "x", "patern": "typo"}, "patern"),
    ],
)
def test_regex_kind_refuses_bad_arguments(params: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidJudgeSpec, match=problem):
        kinds.regex(regex(**params), TRANSCRIPT)


def test_registry_names_kinds_and_refuses_duplicates() -> None:
    assert {"llm", "regex"} <= set(known_kinds())
    assert kinds.deterministic_kind("regex") is kinds.regex
    assert kinds.deterministic_kind("llm") is None  # model-graded, not a function here
    with pytest.raises(ValueError, match="already registered"):
        judge_kind("regex")(kinds.regex)
    with pytest.raises(ValueError, match="already registered"):
        judge_kind("llm")(kinds.regex)


def test_a_new_kind_is_one_registered_function() -> None:
    @judge_kind("test_min_turns")
    def min_turns(spec: JudgeSpec, transcript: Any) -> kinds.Decision:
        n = sum(m.role in ("user", "assistant") for m in transcript)
        return kinds.Decision(n >= spec.params["n"], f"{n} turns")

    try:
        assert kinds.deterministic_kind("test_min_turns") is min_turns
        spec = JudgeSpec(id="turns", kind="test_min_turns", n=3)
        assert min_turns(spec, TRANSCRIPT).passed is True
    finally:
        kinds._KINDS.pop("test_min_turns")


def test_a_kind_without_an_argument_model_takes_no_arguments() -> None:
    # llm, and a kind registered without `params`: nothing would check an extra field, so
    # a typo (`gatting: false`) or a wish (`modle: gpt-5`) would be silently ignored
    assert kinds.spec_problems(JudgeSpec(id="j", assertion="a", gatting=False)) == [
        (
            ("gatting",),
            "unknown field 'gatting'; did you mean 'gating'? (a judge of kind llm takes only "
            "id, kind, assertion, gating, dimension)",
        )
    ]
    assert kinds.spec_problems(JudgeSpec(id="j", assertion="a")) == []

    @judge_kind("test_no_params")
    def no_params(spec: JudgeSpec, transcript: Any) -> kinds.Decision:
        return kinds.Decision(True, "ok")

    try:
        assert kinds.spec_problems(JudgeSpec(id="j", kind="test_no_params")) == []
        [(loc, problem)] = kinds.spec_problems(JudgeSpec(id="j", kind="test_no_params", n=3))
        assert loc == ("n",) and problem.startswith(
            "unknown field 'n' (a judge of kind test_no_params"
        )
    finally:
        kinds._KINDS.pop("test_no_params")


# ------------------------------------------------------------ repeated_question


def _asked(*texts: str) -> list:
    from schemas.events import Message

    out = []
    for t in texts:
        out += [Message(role="assistant", content=t), Message(role="user", content="ok")]
    return out


def test_repeated_question_fails_on_a_question_asked_again() -> None:
    from schemas.scenario import JudgeSpec
    from services.grading.kinds import repeated_question

    spec = JudgeSpec(id="no_repeat", kind="repeated_question")
    again = repeated_question(
        spec,
        _asked(
            "What was the fault?",
            "Noted. Which parts?",
            "Sorry, what was the fault again? And: tests?",
        ),
    )
    assert not again.passed and "already asked in assistant message 0" in again.reason
    fine = repeated_question(
        spec,
        _asked("What was the fault?", "What did you do to fix it?", "Which parts did you fit?"),
    )
    assert fine.passed
    # Short questions ("Anything else?") may come back; they are below min_words.
    assert repeated_question(spec, _asked("Anything else?", "Anything else?")).passed
    # A question repeated inside one message is one question, not a re-ask.
    assert repeated_question(spec, _asked("What was the fault? What was the fault?")).passed


def test_repeated_question_arguments_are_checked() -> None:
    from schemas.scenario import JudgeSpec
    from services.grading.kinds import spec_problems

    assert spec_problems(JudgeSpec(id="r", kind="repeated_question", min_words=0))
    assert not spec_problems(JudgeSpec(id="r", kind="repeated_question", min_words=4))
