"""The two outcome gates, as pure functions over the trial's events and its scenario.

Both grade what the agent produced, never the path it took: tool calls in the
transcript are kept for debugging and ignored here.
"""

from __future__ import annotations

from schemas.events import (
    CheckOutcome,
    ConversationFinished,
    ExitSource,
    GateResult,
    JudgeRequest,
    RegradeRequest,
    SessionPersisted,
    TrialIdentity,
    count_turns,
    with_attempt,
)
from schemas.scenario import Scenario
from services.gate.expectations import check_expectation
from services.gate.external import external_results
from services.grading.production import llm_judges_sampled


class UnpublishedScenario(ValueError):
    """A scenario without a version was handed to a gate: only published ones are graded."""


def observed_exit(
    conversation: ConversationFinished, session: SessionPersisted | None
) -> tuple[str, ExitSource]:
    """The exit the product persisted when it recorded one, else the harness's."""
    if session is not None and session.exit_reason:
        return session.exit_reason, "session"
    return conversation.exit_reason, "harness"


def _gate_result(
    gate: str,
    conversation: ConversationFinished,
    scenario: Scenario,
    checks: list[CheckOutcome],
    *,
    exit_reason: str | None = None,
    exit_source: ExitSource | None = None,
    sample_rate: float | None = None,
) -> GateResult:
    if not scenario.version:
        raise UnpublishedScenario(f"scenario {scenario.id!r} has no version: publish it first")
    return GateResult(
        event_id=f"gate:{conversation.trial_id}:{gate}:{scenario.version}",
        **TrialIdentity.of(conversation, scenario.version).as_fields(),
        gate=gate,
        passed=all(c.passed for c in checks),
        reasons=[c.reason for c in checks if not c.passed],
        checks=checks,
        agent_version=conversation.agent_version,
        exit_reason=exit_reason or conversation.exit_reason,
        exit_source=exit_source,
        completion=scenario.completion,
        metrics=conversation.metrics,
        finished_at=conversation.occurred_at,
        sampled=llm_judges_sampled(conversation, scenario, sample_rate),
    )


def exit_checks(
    conversation: ConversationFinished,
    scenario: Scenario,
    session: SessionPersisted | None = None,
) -> list[CheckOutcome]:
    observed, source = observed_exit(conversation, session)
    expected = scenario.expected_exit
    whose = "recorded by the product" if source == "session" else "observed by the harness"
    if source == "session" and observed != conversation.exit_reason:
        whose += f"; the harness saw {conversation.exit_reason!r}"
    if conversation.production and source == "harness" and observed == "unknown":
        whose = (
            "the production trace named no exit: no passk.exit_reason, nor the "
            f"scenario's exit_attribute {scenario.exit_attribute!r}"
        )
    checks = [
        CheckOutcome(
            check="exit:expected_exit",
            passed=observed in expected,
            reason=(
                f"exit {observed!r} ({whose}) is expected"
                if observed in expected
                else f"exit {observed!r} ({whose}) is not one of the expected exits {expected}"
            ),
            expected=expected,
            found=observed,
        )
    ]
    limits = scenario.limits
    metrics = conversation.metrics
    if limits.max_turns is not None:
        reported = metrics.turns if metrics and metrics.turns is not None else None
        turns = reported if reported is not None else count_turns(conversation.transcript)
        counted = "reported" if reported is not None else "counted from the transcript"
        ok = turns <= limits.max_turns
        checks.append(
            CheckOutcome(
                check="exit:max_turns",
                passed=ok,
                reason=f"{turns} turns ({counted}) {'within' if ok else 'exceed'} the limit "
                f"of {limits.max_turns}",
                expected=limits.max_turns,
                found=turns,
            )
        )
    if limits.max_duration_s is not None:
        duration_ms = metrics.duration_ms if metrics else None
        seconds = None if duration_ms is None else duration_ms / 1000
        ok = seconds is not None and seconds <= limits.max_duration_s
        checks.append(
            CheckOutcome(
                check="exit:max_duration_s",
                passed=ok,
                reason=f"a duration limit of {limits.max_duration_s:g} s is set but the "
                "producer reported no metrics.duration_ms"
                if seconds is None
                else f"duration {seconds:g} s {'within' if ok else 'exceeds'} the limit "
                f"of {limits.max_duration_s:g} s",
                expected=limits.max_duration_s,
                found=seconds,
            )
        )
    return checks


def exit_gate(
    conversation: ConversationFinished,
    scenario: Scenario,
    session: SessionPersisted | None = None,
    sample_rate: float | None = None,
) -> GateResult:
    """Gate 1: the product closed the conversation as expected, within the limits. The
    exit checked is the one the product persisted when the session recorded one. The
    trial's external checks ride along on this result (services.gate.external)."""
    exit_reason, source = observed_exit(conversation, session)
    result = _gate_result(
        "exit",
        conversation,
        scenario,
        exit_checks(conversation, scenario, session),
        exit_reason=exit_reason,
        exit_source=source,
        sample_rate=sample_rate,
    )
    # Carried on the one gate result every trial has, so the verdict waits for nothing
    # more; the exit gate's own `passed` stays about the exit.
    result.external_checks = external_results(conversation, scenario)
    return result


def gates_for(
    conversation: ConversationFinished,
    session: SessionPersisted | None,
    scenario: Scenario,
    *,
    waited_s: float,
    sample_rate: float | None = None,
) -> list[GateResult]:
    """Every gate the scenario asks for: the state gate only under product-owned completion.
    Each says whether the trial's LLM judges run (`sampled`; `sample_rate`: a re-grade's)."""
    results = [exit_gate(conversation, scenario, session, sample_rate)]
    if scenario.has_state_gate:
        results.append(
            state_gate(conversation, session, scenario, waited_s=waited_s, sample_rate=sample_rate)
        )
    return results


def state_gate(
    conversation: ConversationFinished,
    session: SessionPersisted | None,
    scenario: Scenario,
    *,
    waited_s: float,
    sample_rate: float | None = None,
) -> GateResult:
    """Gate 2: the persisted session holds every expected value.

    A session that never arrived is a failed gate, not an error: the product did not
    persist what the conversation claimed.
    """
    if session is None:
        checks = [
            CheckOutcome(
                check="state:persisted",
                passed=False,
                reason=f"no persisted session within {waited_s:g} s",
                expected="a session_persisted event",
                found=None,
            )
        ]
    else:
        checks = [check_expectation(exp, session.state) for exp in scenario.outcome]
    return _gate_result("state", conversation, scenario, checks, sample_rate=sample_rate)


def regrade_gates(
    request: RegradeRequest, scenario: Scenario, *, session_wait_s: float
) -> list[GateResult]:
    """The gates of a re-grade: graded as ever from the request's input events (no session
    in the log is the missing-session failure), stamped with its attempt and new ids."""
    results = gates_for(
        request.conversation,
        request.session,
        scenario,
        waited_s=session_wait_s,
        sample_rate=request.sample_rate,
    )
    return [
        r.model_copy(
            update={
                "attempt": request.attempt,
                "event_id": with_attempt(r.event_id, request.attempt),
            }
        )
        for r in results
    ]


def judge_request(conv: ConversationFinished, results: list[GateResult]) -> JudgeRequest:
    """What the judge grades a skip_when_gates_fail trial from, once its gates are decided:
    whether they passed, which failed, and the conversation itself."""
    version = results[0].scenario_version
    return JudgeRequest(
        event_id=f"judge-request:{conv.trial_id}:{version}",
        trial_id=conv.trial_id,
        scenario_id=conv.scenario_id,
        scenario_version=version,
        gates_passed=all(r.passed for r in results),
        failed_gates=[r.gate for r in results if not r.passed],
        conversation=conv,
    )
