"""Verdicts for one trial's judges: plain functions over the event and scenario models."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import (
    ConversationFinished,
    JudgeResult,
    JudgeVerdict,
    TrialIdentity,
    with_attempt,
)
from schemas.scenario import JudgeSpec, Scenario
from services.grading.kinds import LLM, InvalidJudgeSpec, deterministic_kind, known_kinds
from services.judge.prompt import PROMPT_HASH, Answer


@dataclass
class CallResult:
    """What one model call came to: an answer, or the cause it failed after its retries."""

    answer: Answer | None
    cause: str | None  # None when answered
    detail: str
    attempts: int
    latency_ms: float
    input_tokens: int | None
    output_tokens: int | None
    model: str


@dataclass(frozen=True)
class CachedAnswer:
    """A verdict the store remembers for the same judge version and transcript."""

    passed: bool
    reason: str
    answered_by: str | None
    input_tokens: int | None
    output_tokens: int | None


def verdict_event_id(trial_id: str, judge_id: str, scenario_version: str) -> str:
    """Deterministic: a redelivered or replayed trial yields the same id, so it can be dropped."""
    return f"judge:{trial_id}:{judge_id}:{scenario_version}"


def for_attempt(verdicts: list[JudgeVerdict], attempt: int) -> list[JudgeVerdict]:
    """A re-grade's verdicts: the same judgements, stamped with its attempt and new ids."""
    return [
        v.model_copy(update={"attempt": attempt, "event_id": with_attempt(v.event_id, attempt)})
        for v in verdicts
    ]


def scenario_version(scenario: Scenario) -> str:
    return scenario.version or scenario.content_hash()


def error_reason(cause: str, detail: str) -> str:
    """An error verdict's reason starts with its cause, a low-cardinality word."""
    return f"{cause}: {detail}"


def make_verdict(
    trial: ConversationFinished,
    scenario: Scenario,
    spec: JudgeSpec,
    *,
    result: JudgeResult,
    reason: str,
    **facts: object,
) -> JudgeVerdict:
    version = scenario_version(scenario)
    return JudgeVerdict(
        event_id=verdict_event_id(trial.trial_id, spec.id, version),
        **TrialIdentity.of(trial, version).as_fields(),
        judge_id=spec.id,
        judge_kind=spec.kind,
        judge_spec=spec.model_dump(mode="json"),
        gating=spec.gating,
        result=result,
        reason=reason,
        **facts,
    )


def answered_verdict(
    trial: ConversationFinished,
    scenario: Scenario,
    spec: JudgeSpec,
    *,
    passed: bool,
    reason: str,
    **facts: object,
) -> JudgeVerdict:
    """The verdict of a judge that answered (a kind's decision, a model's or the cache's
    answer): `passed` or `failed` with its reason."""
    return make_verdict(
        trial, scenario, spec, result="passed" if passed else "failed", reason=reason, **facts
    )


def deterministic_verdict(
    trial: ConversationFinished, scenario: Scenario, spec: JudgeSpec
) -> JudgeVerdict:
    """A judge of a registered deterministic kind: no model call, same verdict shape."""
    judge = deterministic_kind(spec.kind)
    if judge is None:
        detail = f"no judge kind {spec.kind!r} (known: {', '.join(known_kinds())})"
        return make_verdict(
            trial, scenario, spec, result="error", reason=error_reason("unknown_judge_kind", detail)
        )
    try:
        decision = judge(spec, trial.transcript)
    except InvalidJudgeSpec as exc:
        return make_verdict(
            trial,
            scenario,
            spec,
            result="error",
            reason=error_reason("invalid_judge_spec", str(exc)),
        )
    except Exception as exc:  # a kind's own failure is this judge's error, never a pass
        return make_verdict(
            trial,
            scenario,
            spec,
            result="error",
            reason=error_reason("judge_failed", f"{type(exc).__name__}: {exc}"),
        )
    return answered_verdict(trial, scenario, spec, passed=decision.passed, reason=decision.reason)


def llm_verdict(
    trial: ConversationFinished, scenario: Scenario, spec: JudgeSpec, call: CallResult
) -> JudgeVerdict:
    """The model's answer, or `error` with its cause once the retry budget is spent."""
    if call.answer is None:
        result: JudgeResult = "error"
        reason = error_reason(call.cause or "unknown", call.detail)
    else:
        result = "passed" if call.answer.passed else "failed"
        reason = call.answer.reason
    return make_verdict(
        trial,
        scenario,
        spec,
        result=result,
        reason=reason,
        model=call.model,
        prompt_hash=PROMPT_HASH,
        latency_ms=round(call.latency_ms, 3),
        input_tokens=call.input_tokens,
        output_tokens=call.output_tokens,
        attempts=call.attempts,
        cached=False,
    )


def cached_verdict(
    trial: ConversationFinished, scenario: Scenario, spec: JudgeSpec, hit: CachedAnswer
) -> JudgeVerdict:
    """A verdict served from the cache: the stored answer, no call, no tokens spent."""
    return answered_verdict(
        trial,
        scenario,
        spec,
        passed=hit.passed,
        reason=hit.reason,
        model=hit.answered_by,
        prompt_hash=PROMPT_HASH,
        latency_ms=0.0,
        attempts=0,
        cached=True,
    )


def skipped_verdict(
    trial: ConversationFinished, scenario: Scenario, spec: JudgeSpec, failed_gates: list[str]
) -> JudgeVerdict:
    """An LLM judge not asked because the gates already failed the trial: no call, no
    tokens; `skipped`, which neither passes, fails nor errors the trial."""
    gates = ", ".join(f"gate:{g}" for g in failed_gates) or "a gate"
    return make_verdict(
        trial,
        scenario,
        spec,
        result="skipped",
        reason=f"skipped: {gates} already failed the trial (skip_when_gates_fail)",
        prompt_hash=PROMPT_HASH,
    )


def not_sampled_verdict(
    trial: ConversationFinished, scenario: Scenario, spec: JudgeSpec, rate: float
) -> JudgeVerdict:
    """An LLM judge of a production trial outside the scenario's sample: no call, no
    tokens; `not_sampled`, which neither passes, fails nor errors the trial."""
    return make_verdict(
        trial,
        scenario,
        spec,
        result="not_sampled",
        reason=f"not_sampled: production trial outside the {rate:g} LLM-judge sample",
        prompt_hash=PROMPT_HASH,
    )


def judge_request_id(trial_id: str, scenario_version: str) -> str:
    return f"judge-request:{trial_id}:{scenario_version}"


def not_configured_verdict(
    trial: ConversationFinished, scenario: Scenario, spec: JudgeSpec
) -> JudgeVerdict:
    detail = "no judge model configured: set OPENAI_BASE_URL (or run `passk judge-standin`)"
    return make_verdict(
        trial,
        scenario,
        spec,
        result="error",
        reason=error_reason("not_configured", detail),
        prompt_hash=PROMPT_HASH,
    )


def is_llm(spec: JudgeSpec) -> bool:
    return spec.kind == LLM
