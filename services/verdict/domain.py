"""Assembling a trial's verdict: (state, event, now) -> state, and state -> verdict.

A trial passes only when the exit gate, the state gate, every external check the scenario
names and every gating judge of the scenario version it was graded against passed: AND,
never OR. External checks it does not name are recorded (`advisory_checks`), never
counted. Whether a judge's verdict gates is decided here, at verdict time, per judge
version, by the calibration policy (`services.grading.calibration.GatingPolicy`); an
advisory verdict is recorded with why and never fails (nor errors) the trial. A check that failed
makes the trial `failed`; one that could not be made at all (a judge past its retry
budget, a verdict that never came) makes it `error` unless another check already
failed it. Either way an errored check is never read as a pass. A judge `skipped`
(skip_when_gates_fail: its gates had already failed the trial) is listed as skipped and
counts as neither; an LLM judge of a production trial outside its scenario's sample (the
gate results say `sampled: false`) is `not_sampled`: never waited for, never counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from schemas.events import (
    AdvisoryJudge,
    ExternalCheckResult,
    FailedCheck,
    GateResult,
    JudgeVerdict,
    TrialIdentity,
    TrialVerdict,
    with_attempt,
)
from schemas.events import TrialOutcome as Outcome
from schemas.scenario import Scenario
from services.contract.settings import Settings
from services.grading.calibration import CalibrationBook, GatingPolicy

GATES = ("exit", "state")


def expected_gates(gates: dict[str, GateResult]) -> tuple[str, ...]:
    """The gates a trial needs: both, unless its scenario has no product-owned completion
    (every gate result says which; a trial with none yet is assumed to need both)."""
    if any(g.completion == "conversation" for g in gates.values()):
        return ("exit",)
    return GATES


class TrialState(BaseModel):
    trial_id: str
    run_id: str
    scenario_id: str
    session_id: str
    first_seen_at: float
    gates: dict[str, GateResult] = Field(default_factory=dict)  # by gate name
    judges: dict[str, JudgeVerdict] = Field(default_factory=dict)  # by "judge_id@version"
    gates_complete_at: float | None = None
    emitted_at: float | None = None
    emitted_outcome: Outcome | None = None
    # The grading attempt being assembled (or emitted): a re-grade's results (a higher
    # attempt) start it afresh, and results of a lower attempt are ignored.
    attempt: int = 1

    @property
    def scenario_version(self) -> str | None:
        versions = {g.scenario_version for g in self.gates.values()}
        complete = set(expected_gates(self.gates)) <= set(self.gates)
        return versions.pop() if len(versions) == 1 and complete else None


@dataclass(frozen=True)
class Timing:
    judge_wait_s: float  # after both gates are in, how long to wait for the judges
    gate_wait_s: float  # after the first judge verdict, how long to wait for the gates
    retention_s: float  # how long an emitted trial is remembered, to drop repeats

    @classmethod
    def of(cls, settings: Settings) -> Timing:
        # The gates are waited for as long as the gate waits for a session.
        return cls(
            judge_wait_s=settings.judge_wait_s,
            gate_wait_s=settings.session_wait_s,
            retention_s=settings.dedup_retention_s,
        )


# What a trial's state keeps of the trial it assembles: its identity but the scenario
# version (which its gate results decide) and the attempt being assembled.
OF_TRIAL = {"trial_id", "run_id", "scenario_id", "session_id", "attempt"}


def new_state(ref: GateResult | JudgeVerdict, now: float) -> TrialState:
    return TrialState(**ref.model_dump(include=OF_TRIAL), first_seen_at=now)


def _current(state: TrialState | None, ref: GateResult | JudgeVerdict, now: float) -> TrialState:
    """The state this result counts in: a higher attempt than the state's starts afresh
    (the memory of the emitted attempt is bypassed for it, and only for it)."""
    if state is None or ref.attempt > state.attempt:
        return new_state(ref, now)
    return state


def on_gate_result(state: TrialState | None, result: GateResult, now: float) -> TrialState:
    state = _current(state, result, now)
    if state.emitted_at is not None or result.attempt < state.attempt:
        return state
    gates = {**state.gates, result.gate: result}
    complete = set(expected_gates(gates)) <= set(gates) and (
        len({g.scenario_version for g in gates.values()}) == 1
    )
    return state.model_copy(
        update={
            "gates": gates,
            "gates_complete_at": (state.gates_complete_at or now) if complete else None,
        }
    )


def on_judge_verdict(state: TrialState | None, verdict: JudgeVerdict, now: float) -> TrialState:
    state = _current(state, verdict, now)
    if state.emitted_at is not None or verdict.attempt < state.attempt:
        return state
    key = f"{verdict.judge_id}@{verdict.scenario_version}"
    return state.model_copy(update={"judges": {**state.judges, key: verdict}})


def identity_conflict(state: TrialState | None, ref: GateResult | JudgeVerdict) -> str | None:
    """Why `ref` cannot count in this trial (None: it can). A trial id names one trial:
    its run, scenario and session are those of the first result read for it (pending or
    remembered as emitted). A result naming others is a second trial reusing the id
    (a producer's mistake): counted in the first, it would mix two trials' checks."""
    if state is None:
        return None
    mine = (state.run_id, state.scenario_id, state.session_id)
    theirs = (ref.run_id, ref.scenario_id, ref.session_id)
    if mine == theirs:
        return None
    return (
        f"trial {ref.trial_id!r} of run {ref.run_id!r}, scenario {ref.scenario_id!r}, "
        f"session {ref.session_id!r} reuses the id of trial {state.trial_id!r} of run "
        f"{state.run_id!r}, scenario {state.scenario_id!r}, session {state.session_id!r}"
        "; the first is graded, this one is not"
    )


def is_duplicate(state: TrialState | None, ref: GateResult | JudgeVerdict | None = None) -> bool:
    """Nothing to do with this result: its attempt was emitted already, or a later attempt
    superseded it."""
    if state is None:
        return False
    attempt = state.attempt if ref is None else ref.attempt
    if attempt < state.attempt:
        return True
    return attempt == state.attempt and state.emitted_at is not None


def missing_checks(state: TrialState, scenario: Scenario | None) -> list[str]:
    """The checks still awaited; empty when the verdict can be assembled."""
    needed = expected_gates(state.gates)
    if not state.gates and scenario is not None and not scenario.has_state_gate:
        needed = ("exit",)
    missing = [f"gate:{g}" for g in needed if g not in state.gates]
    version = state.scenario_version
    if missing or version is None or scenario is None:
        return missing or ["gate:version"]
    sampled = is_sampled(state)
    return [
        f"judge:{j.id}"
        for j in scenario.gating_judges
        if f"{j.id}@{version}" not in state.judges and (sampled or j.kind != "llm")
    ] + [
        f"user:{u.id}"
        for u in scenario.user_checks
        if u.gating and f"user:{u.id}@{version}" not in state.judges
    ]


def is_sampled(state: TrialState) -> bool:
    """False for a production trial outside its scenario's LLM-judge sample (its gate
    results say so): its LLM judges are `not_sampled`, never waited for."""
    return all(g.sampled for g in state.gates.values())


def due_at(state: TrialState, timing: Timing) -> float | None:
    if state.emitted_at is not None:
        return state.emitted_at + timing.retention_s
    if state.gates_complete_at is not None:
        return state.gates_complete_at + timing.judge_wait_s
    return state.first_seen_at + timing.gate_wait_s + timing.judge_wait_s


@dataclass(frozen=True)
class TickDecision:
    """What a deadline tick does to a trial: nothing yet, forget it, or emit its verdict
    now with the checks still missing counted as errors."""

    action: Literal["wait", "forget", "emit"]
    missing: list[str] = field(default_factory=list)
    waited_s: float = 0.0


def on_tick(
    state: TrialState, now: float, timing: Timing, scenario: Scenario | None
) -> TickDecision:
    """A tick at `now` (the stream clock of the trial's partition, so a worker catching up
    on a backlog does not give up on verdicts waiting in it)."""
    due = due_at(state, timing)
    if due is not None and now < due:
        return TickDecision("wait")
    if state.emitted_at is not None:  # remembered long enough to drop its repeats
        return TickDecision("forget")
    waited = (
        timing.judge_wait_s
        if state.gates_complete_at is not None
        else (timing.gate_wait_s + timing.judge_wait_s)
    )
    return TickDecision("emit", missing_checks(state, scenario), waited)


@dataclass
class _Checks:
    """Every check of a trial, sorted as the verdict reports them."""

    passed: list[str] = field(default_factory=list)
    failed: list[FailedCheck] = field(default_factory=list)
    errors: list[FailedCheck] = field(default_factory=list)
    spoiled: list[FailedCheck] = field(default_factory=list)  # the simulated user's, failed
    gating: list[str] = field(default_factory=list)
    advisory: list[AdvisoryJudge] = field(default_factory=list)
    advisory_checks: list[ExternalCheckResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    not_sampled: list[str] = field(default_factory=list)

    @property
    def outcome(self) -> Outcome:
        return (
            "invalid"
            if self.spoiled
            else "failed"
            if self.failed
            else "error"
            if self.errors
            else "passed"
        )


def _gates(state: TrialState, checks: _Checks) -> None:
    for name in GATES:
        gate = state.gates.get(name)
        if gate is None:
            continue
        if gate.passed:
            checks.passed.append(f"gate:{name}")
        else:
            checks.failed.append(FailedCheck(check=f"gate:{name}", reason="; ".join(gate.reasons)))


def _external(state: TrialState, scenario: Scenario, checks: _Checks) -> None:
    exit_gate = state.gates.get("exit")
    # The gate read the conversation's external checks against this scenario version and
    # marked the ones it names as gating; a named one not reported arrives failed.
    carried = exit_gate.external_checks if exit_gate else []
    for external in carried:
        if not external.gating:
            checks.advisory_checks.append(external)
        elif external.passed:
            checks.passed.append(external.check)
        else:
            checks.failed.append(FailedCheck(check=external.check, reason=external.reason))
    # A named check the exit gate's result says nothing about was never graded (a gate
    # worker from before external checks, say): an error, never a silent pass.
    graded = {e.check for e in carried if e.gating}
    if exit_gate is not None:
        for check_id in scenario.external_checks:
            if f"external:{check_id}" not in graded:
                checks.errors.append(
                    FailedCheck(
                        check=f"external:{check_id}",
                        reason="error: the exit gate's result carries no result for this "
                        "external check (graded by a gate from before external checks?)",
                    )
                )


def _judges(
    state: TrialState,
    scenario: Scenario,
    version: str | None,
    sampled: bool,
    policy: GatingPolicy,
    book: CalibrationBook,
    checks: _Checks,
) -> None:
    for judge in scenario.judges:
        verdict = state.judges.get(f"{judge.id}@{version}")
        if verdict is None or verdict.result == "not_sampled":
            if not sampled and judge.kind == "llm":  # outside the sample: never waited for
                checks.not_sampled.append(judge.id)
            continue
        if verdict.result == "skipped":  # not asked: the gates had failed the trial already
            checks.skipped.append(judge.id)
            continue
        gates, why = policy.gates(judge, verdict.judge_version, book.get(verdict.judge_version))
        if not gates:
            checks.advisory.append(AdvisoryJudge(
                judge_id=judge.id, judge_version=verdict.judge_version, why=why,
                result=verdict.result, reason=verdict.reason,
            ))  # fmt: skip
            continue
        checks.gating.append(judge.id)
        check = f"judge:{judge.id}"
        if verdict.result == "passed":
            checks.passed.append(check)
        elif verdict.result == "failed":
            checks.failed.append(FailedCheck(check=check, reason=verdict.reason))
        else:
            checks.errors.append(FailedCheck(check=check, reason=f"error: {verdict.reason}"))


def _user_checks(
    state: TrialState,
    scenario: Scenario,
    version: str | None,
    policy: GatingPolicy,
    book: CalibrationBook,
    checks: _Checks,
) -> None:
    """The simulated user's checks: one that failed spoils the trial (`invalid`, whatever
    the agent's checks said); one that could not be made is an error like any check."""
    for spec in scenario.user_checks:
        check = f"user:{spec.id}"
        verdict = state.judges.get(f"{check}@{version}")
        if verdict is None:
            continue
        gates, why = policy.gates(spec, verdict.judge_version, book.get(verdict.judge_version))
        if not gates:
            checks.advisory.append(AdvisoryJudge(
                judge_id=check, judge_version=verdict.judge_version, why=why,
                result=verdict.result, reason=verdict.reason,
            ))  # fmt: skip
            continue
        if verdict.result == "passed":
            checks.passed.append(check)
        elif verdict.result == "failed":
            checks.spoiled.append(FailedCheck(check=check, reason=verdict.reason))
        elif verdict.result == "error":
            checks.errors.append(FailedCheck(check=check, reason=f"error: {verdict.reason}"))


def assemble(
    state: TrialState,
    scenario: Scenario,
    *,
    missing: list[str],
    waited_s: float,
    policy: GatingPolicy,
    book: CalibrationBook,
) -> TrialVerdict:
    """Build the one verdict of a trial. `missing` checks are counted as errors."""
    checks = _Checks()
    _gates(state, checks)
    _external(state, scenario, checks)
    version = state.scenario_version or scenario.version
    sampled = is_sampled(state)
    _judges(state, scenario, version, sampled, policy, book, checks)
    _user_checks(state, scenario, version, policy, book, checks)
    for check in missing:
        checks.errors.append(
            FailedCheck(check=check, reason=f"error: no result within {waited_s:g} s")
        )

    exit_gate = state.gates.get("exit")
    facts = exit_gate or state.gates.get("state")
    return TrialVerdict(
        event_id=with_attempt(f"verdict:{state.trial_id}", state.attempt),
        **TrialIdentity.of(state, version or "unknown").as_fields(),
        k=scenario.trials,
        outcome=checks.outcome,
        failed_checks=checks.spoiled + checks.failed + checks.errors,
        checks_passed=checks.passed,
        gating_judges=checks.gating,
        advisory_judges=checks.advisory,
        advisory_checks=checks.advisory_checks,
        skipped_judges=checks.skipped,
        sampled=sampled,
        not_sampled_judges=checks.not_sampled,
        agent_version=facts.agent_version if facts else None,
        exit_reason=facts.exit_reason if facts else None,
        exit_source=exit_gate.exit_source if exit_gate else None,
        completion=facts.completion if facts else scenario.completion,
        metrics=facts.metrics if facts else None,
        finished_at=facts.finished_at if facts else None,
        attempt=state.attempt,
    )


def emitted(state: TrialState, verdict: TrialVerdict, now: float) -> TrialState:
    """What is remembered of an emitted trial: enough to recognise a repeat."""
    return TrialState(
        **state.model_dump(include=OF_TRIAL),
        first_seen_at=state.first_seen_at,
        emitted_at=now,
        emitted_outcome=verdict.outcome,
    )


def is_marker(state: TrialState) -> bool:
    """An emitted trial with no results pending: only remembered, to drop its repeats (on
    disk, services.runtime.graded), never ticked."""
    return state.emitted_at is not None and not state.gates and not state.judges


def awaiting(state: TrialState) -> Literal["gate", "judge"] | None:
    """Which input a pending trial waits for: its gate results while any is missing, then
    its judges' verdicts (None: emitted)."""
    if state.emitted_at is not None:
        return None
    if state.gates_complete_at is None:
        return "gate"
    return "judge"
