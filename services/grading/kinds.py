"""Judge kinds, registered by name (as inspect_ai registers scorers).

`llm` is the model-graded kind: its work is a model call (see `client`). Every other kind
is deterministic: a small function `(spec, transcript) -> Decision` that makes no model call
and is registered with `@judge_kind("name", params=Model)`. Its arguments are the extra
fields of the `JudgeSpec`, validated by its `params` model (a kind registered without one,
like `llm`, takes none: `passk scenarios validate` refuses any extra field), and the whole
spec is recorded with every verdict.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from schemas.events import Message
from schemas.patterns import compile_pattern
from schemas.scenario import JudgeSpec

LLM = "llm"


@dataclass(frozen=True)
class Decision:
    passed: bool
    reason: str


class InvalidJudgeSpec(ValueError):
    """The judge's arguments do not fit its kind; the verdict is `error`, never a pass."""


DeterministicJudge = Callable[[JudgeSpec, Sequence[Message]], Decision]
_KINDS: dict[str, DeterministicJudge] = {}
# Each kind's argument model: `passk scenarios validate` checks a judge's arguments with it,
# so arguments that do not fit are refused before publishing, not `error` on every trial.
_PARAMS: dict[str, type[BaseModel]] = {}


def judge_kind(
    name: str, params: type[BaseModel] | None = None
) -> Callable[[DeterministicJudge], DeterministicJudge]:
    def register(fn: DeterministicJudge) -> DeterministicJudge:
        if name == LLM or name in _KINDS:
            raise ValueError(f"judge kind {name!r} is already registered")
        _KINDS[name] = fn
        if params is not None:
            _PARAMS[name] = params
        return fn

    return register


def _unknown_fields(spec: JudgeSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """A judge of a kind that takes no arguments (`llm`, or a kind registered without an
    argument model): each extra field is a typo or a wish (`gatting: false`, `model:`)
    that would otherwise be silently ignored."""
    allowed = list(JudgeSpec.model_fields)
    found: list[tuple[tuple[str | int, ...], str]] = []
    for name in spec.params:
        guess = difflib.get_close_matches(name, allowed, n=1)
        hint = f"; did you mean {guess[0]!r}?" if guess else ""
        found.append(
            (
                (name,),
                f"unknown field {name!r}{hint} (a judge of kind {spec.kind} takes only "
                f"{', '.join(allowed)})",
            )
        )
    return found


def spec_problems(spec: JudgeSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """What is wrong with a judge before any trial runs: (field path, problem) pairs."""
    if spec.kind == LLM:
        return _unknown_fields(spec)
    if spec.kind not in _KINDS:
        known = ", ".join(known_kinds())
        return [(("kind",), f"unknown judge kind {spec.kind!r} (known: {known})")]
    model = _PARAMS.get(spec.kind)
    if model is None:
        return _unknown_fields(spec)
    try:
        model.model_validate(spec.params)
    except ValidationError as exc:
        return [
            (tuple(e["loc"]), f"{e['msg'].removeprefix('Value error, ')} ({spec.kind} judge)")
            for e in exc.errors()
        ]
    return []


# The simulated user's own turns, as a user check reads them (services.grading.user_checks).
USER_ROLE = "user"


def user_check_problems(spec: JudgeSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """What is wrong with a judge as a *user check*, beyond `spec_problems`: a user check
    that fails makes the trial `invalid` (out of n and pass^k), so it may read only the
    simulated user's own turns, or an agent failure would be booked as the user's.
    `llm` judges the user by its assertion; `regex` only with `role: user` (its default in
    a user check); every other kind reads the assistant's turns (`repeated_question`) or
    nothing known to be the user's, and is refused."""
    if spec.kind == LLM or spec.kind not in _KINDS:
        return []  # an unknown kind is spec_problems' to report
    if spec.kind == "regex":
        role = spec.params.get("role", USER_ROLE)
        if role == USER_ROLE:
            return []
        return [
            (
                ("role",),
                f"a user check reads only the simulated user's turns: role must be "
                f"{USER_ROLE!r} (its default here), not {role!r}; to check the "
                "assistant, make it a judge (under judges:)",
            )
        ]
    what = (
        "the assistant's questions"
        if spec.kind == "repeated_question"
        else "turns other than the simulated user's"
    )
    return [
        (
            ("kind",),
            f"kind {spec.kind!r} reads {what}, not the simulated user's own turns: a user "
            "check may be llm, or regex with role: user; to check the assistant, make it "
            "a judge (under judges:)",
        )
    ]


def deterministic_kind(name: str) -> DeterministicJudge | None:
    return _KINDS.get(name)


def known_kinds() -> list[str]:
    return sorted([LLM, *_KINDS])


def params_of(name: str) -> type[BaseModel] | None:
    """A deterministic kind's argument model (None: it takes none, or it is `llm`)."""
    return _PARAMS.get(name)


def _params(model: type[BaseModel], spec: JudgeSpec) -> BaseModel:
    try:
        return model.model_validate(spec.params)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidJudgeSpec(f"judge {spec.id!r} ({spec.kind}): {problems}") from exc


def _snippet(text: str, start: int, end: int, width: int = 40) -> str:
    lo, hi = max(0, start - width), min(len(text), end + width)
    return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")


# ------------------------------------------------------------------------ regex


class RegexParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(min_length=1)
    must_match: StrictBool = True
    role: Literal["assistant", "user", "system", "tool", "any"] = "assistant"

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        compile_pattern(value)  # PatternError is a ValueError: pydantic reports it
        return value


@judge_kind("regex", params=RegexParams)
def regex(spec: JudgeSpec, transcript: Sequence[Message]) -> Decision:
    """`pattern` must (`must_match: true`, default) or must not match one of the `role`'s turns."""
    params = _params(RegexParams, spec)
    if not isinstance(params, RegexParams):  # _params validated it against RegexParams
        raise InvalidJudgeSpec(f"regex judge {spec.id!r}: parameters did not parse")
    compiled = compile_pattern(params.pattern)
    who = "any" if params.role == "any" else params.role
    for index, message in enumerate(transcript):
        if params.role != "any" and message.role != params.role:
            continue
        found = compiled.search(message.content or "")
        if found is None:
            continue
        where = (
            f"{message.role} message {index}: {_snippet(message.content or '', *found.span())!r}"
        )
        if params.must_match:
            return Decision(True, f"/{params.pattern}/ matched {where}")
        return Decision(False, f"/{params.pattern}/ must not match, but matched {where}")
    if params.must_match:
        return Decision(False, f"/{params.pattern}/ matched no {who} message")
    return Decision(True, f"/{params.pattern}/ matched no {who} message, as required")


# ------------------------------------------------------------ repeated question


class RepeatedQuestionParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_words: int = Field(3, ge=1, le=50)


_QUESTION = re.compile(r"[^.?!]*\?")
_WORD = re.compile(r"[a-z0-9']+")


@judge_kind("repeated_question", params=RepeatedQuestionParams)
def repeated_question(spec: JudgeSpec, transcript: Sequence[Message]) -> Decision:
    """Fails when the assistant asks a question it already asked: a later question holds
    every word of an earlier one of at least `min_words` words ("What was the fault?" and
    "Sorry, what was the fault again?"). Exact and cheap; no model judges it."""
    params = _params(RepeatedQuestionParams, spec)
    if not isinstance(params, RepeatedQuestionParams):
        raise InvalidJudgeSpec(f"repeated_question judge {spec.id!r}: parameters did not parse")
    asked: list[tuple[int, str, frozenset[str]]] = []
    for index, message in enumerate(transcript):
        if message.role != "assistant" or not message.content:
            continue
        for question in _QUESTION.findall(message.content):
            words = frozenset(_WORD.findall(question.lower()))
            for earlier_index, earlier, earlier_words in asked:
                if earlier_index != index and earlier_words <= words:
                    return Decision(
                        False,
                        f"assistant message {index} asks again "
                        f"{question.strip()!r}, already asked in assistant "
                        f"message {earlier_index} ({earlier!r})",
                    )
            if len(words) >= params.min_words:
                asked.append((index, question.strip(), words))
    return Decision(True, f"no assistant question repeats an earlier one ({len(asked)} asked)")
