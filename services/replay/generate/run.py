"""One trial's events from its plan, and the whole run's traffic in production-like order."""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from schemas.events import (
    ConversationFinished,
    ExternalCheck,
    Message,
    SessionPersisted,
    TrialMetrics,
    count_turns,
)
from schemas.scenario import Scenario
from services.replay.generate.config import (
    Expected,
    ExpectedScenario,
    ExpectedTrial,
    GenerateConfig,
    GenerateError,
    InputEvent,
    Traffic,
)
from services.replay.generate.planning import (
    TrialPlan,
    applicable_modes,
    failed_checks,
    mutate_state,
    plan_trials,
    violates_only,
)
from services.replay.generate.transcripts import build_transcript, fail_marker
from services.replay.generate.values import passing_state


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()


def _ids(config: GenerateConfig, plan: TrialPlan) -> tuple[str, str]:
    trial_id = f"{config.run_id}:{plan.scenario.id}:{plan.index:03d}"
    session_id = "sess-" + _digest(config.run_id, plan.scenario.id, plan.index, config.seed)[:20]
    return trial_id, session_id


def build_trial(
    plan: TrialPlan, config: GenerateConfig, rng: random.Random, finished_at: datetime
) -> tuple[ConversationFinished, SessionPersisted, ExpectedTrial]:
    """One trial's two events and the outcome it must get. The phases draw from `rng` in
    a fixed order (state, turns, exit, transcript, metrics, session time): the same seed
    gives the same bytes."""
    trial_id, session_id = _ids(config, plan)
    state = _state(plan, rng)
    conversation, flagged = _conversation(
        plan, config, rng, finished_at, trial_id, session_id, state
    )
    session = _session(
        plan, config, rng, finished_at, trial_id, session_id, state, conversation.exit_reason
    )
    expected = _expected(plan, trial_id, session_id, session.exit_reason, flagged)
    return conversation, session, expected


def _state(plan: TrialPlan, rng: random.Random) -> dict[str, Any]:
    """A passing session state, or one violating exactly the planned expectation."""
    scenario, mode, target = plan.scenario, plan.failure_mode, plan.target
    state = passing_state(scenario, rng)
    if mode in ("missing_field", "unexpected_follow_up"):
        assert isinstance(target, int)
        state = mutate_state(scenario, state, mode, target, rng)
        assert violates_only(scenario, state, target), (scenario.id, mode, target)
    return state


def _conversation(
    plan: TrialPlan,
    config: GenerateConfig,
    rng: random.Random,
    finished_at: datetime,
    trial_id: str,
    session_id: str,
    state: dict[str, Any],
) -> tuple[ConversationFinished, list[str]]:
    """The conversation (its turns, exit, transcript with the judges' fail markers,
    metrics), and the advisory judges flagged to fail on it."""
    scenario, mode, target = plan.scenario, plan.failure_mode, plan.target
    limits = scenario.limits
    upper = min(limits.max_turns or 14, 14)
    turns = rng.randint(min(4, upper), upper)
    if mode == "over_turn_limit":
        assert limits.max_turns is not None
        turns = limits.max_turns + rng.randint(1, 4)
    exit_reason = str(target) if mode == "wrong_exit" else rng.choice(scenario.expected_exit)
    markers = [fail_marker(str(target))] if mode == "judge_failed" else []
    flagged = [
        j.id
        for j in scenario.judges
        if j.id in config.advisory_flags
        and random.Random(_digest(config.seed, trial_id, j.id)).random()
        < config.advisory_flags[j.id]
    ]
    markers += [fail_marker(j) for j in flagged]
    marker = " ".join(markers) or None
    transcript = build_transcript(
        scenario,
        state,
        rng,
        turns=turns,
        closed=mode != "wrong_exit",
        marker=marker,
        call_id="call_" + _digest(session_id, "tool")[:12],
    )
    conversation = ConversationFinished(
        event_id="cf-" + _digest(session_id, "conversation_finished")[:24],
        occurred_at=finished_at,
        run_id=config.run_id,
        scenario_id=scenario.id,
        trial_id=trial_id,
        session_id=session_id,
        agent_version=config.agent_version,
        exit_reason=exit_reason,
        transcript=transcript,
        metrics=_metrics(plan, transcript, rng),
        # The checks a scenario names gate: synthetic traffic reports them, passing (the
        # generator injects no external-check failures), so they fail no trial unplanned.
        checks=[
            ExternalCheck(id=c, passed=True, reason="synthetic: passed")
            for c in scenario.external_checks
        ],
    )
    return conversation, flagged


def _metrics(plan: TrialPlan, transcript: list[Message], rng: random.Random) -> TrialMetrics:
    limits = plan.scenario.limits
    if limits.max_duration_s is not None:
        duration_ms = rng.uniform(0.2, 0.9) * limits.max_duration_s * 1000
        if plan.failure_mode == "over_duration":
            duration_ms = limits.max_duration_s * 1000 + rng.uniform(5_000, 120_000)
    else:
        duration_ms = rng.uniform(20_000, 600_000)
    n_turns = count_turns(transcript)
    assistant_turns = sum(1 for m in transcript if m.role == "assistant")
    return TrialMetrics(
        input_tokens=rng.randint(150, 400) * n_turns,
        output_tokens=rng.randint(20, 90) * assistant_turns,
        turns=n_turns,
        duration_ms=round(duration_ms),
        latency_ms=round(rng.uniform(300, 2500), 1),
    )


def _session(
    plan: TrialPlan,
    config: GenerateConfig,
    rng: random.Random,
    finished_at: datetime,
    trial_id: str,
    session_id: str,
    state: dict[str, Any],
    exit_reason: str | None,
) -> SessionPersisted:
    """The persisted session: early, late or on time (its quirks), with the product's
    own exit or none."""
    if "session_early" in plan.quirks:
        persisted_at = finished_at - timedelta(seconds=rng.uniform(0.5, 3.0))
    elif "session_late" in plan.quirks:
        persisted_at = finished_at + timedelta(seconds=rng.uniform(20.0, 90.0))
    else:
        persisted_at = finished_at + timedelta(seconds=rng.uniform(0.2, 3.0))
    # Products differ: about half record the exit they closed with (the exit gate then
    # checks theirs), the rest leave it to the harness. Decided by digest, not by the rng,
    # so the draws of everything else stay as they were.
    product_exit: str | None = None
    if plan.failure_mode == "product_exit_wrong":
        product_exit = str(plan.target)
    elif int(_digest(session_id, "product_exit")[:8], 16) % 2 == 0:
        product_exit = exit_reason
    return SessionPersisted(
        event_id="sp-" + _digest(session_id, "session_persisted")[:24],
        occurred_at=persisted_at,
        session_id=session_id,
        state=state,
        exit_reason=product_exit,
        trial_id=trial_id,
        run_id=config.run_id,
        scenario_id=plan.scenario.id,
    )


def _expected(
    plan: TrialPlan, trial_id: str, session_id: str, product_exit: str | None, flagged: list[str]
) -> ExpectedTrial:
    """The outcome the trial must get, the checks that must fail it, and why."""
    scenario, mode, target = plan.scenario, plan.failure_mode, plan.target
    checks = failed_checks(mode, target, plan.quirks)
    detail = ""
    if mode in ("missing_field", "unexpected_follow_up"):
        detail = f"state:{scenario.outcome[int(target or 0)].path}"
    elif mode is not None:
        detail = f"{mode}:{target}"
    if not scenario.has_state_gate:
        detail = (detail + "; " if detail else "") + "completion: conversation (no session)"
    return ExpectedTrial(
        trial_id=trial_id,
        scenario_id=scenario.id,
        session_id=session_id,
        expected_outcome="failed" if checks else "passed",
        failure_mode=mode,
        quirks=sorted(plan.quirks),
        expected_failed_checks=checks,
        expected_exit_source="session"
        if product_exit and scenario.has_state_gate and "session_missing" not in plan.quirks
        else "harness",
        detail=detail,
        advisory_flagged=flagged,
    )


def generate(scenarios: Sequence[Scenario], config: GenerateConfig) -> Traffic:
    """Traffic for every scenario, in file order, and the outcome each trial must get."""
    if not scenarios:
        raise GenerateError("no scenarios to generate traffic for")
    config.validate(scenarios)
    rng = random.Random(config.seed)
    modes = {
        s.id: applicable_modes(s, passing_state(s, random.Random(_digest(config.seed, s.id))))
        for s in scenarios
    }
    for found in modes.values():  # an advisory judge's failure cannot fail a trial
        targets = [t for t in found.get("judge_failed", []) if t not in config.advisory_flags]
        if targets:
            found["judge_failed"] = targets
        else:
            found.pop("judge_failed", None)
    plans = plan_trials(scenarios, modes, config, rng)
    order = list(range(len(plans)))
    rng.shuffle(order)  # trials of all scenarios interleave, as in production

    placed: list[tuple[float, int, InputEvent]] = []
    expected_trials: list[ExpectedTrial] = []
    clock = config.started_at
    seq = 0

    def place(position: float, event: InputEvent) -> None:
        nonlocal seq
        placed.append((position, seq, event))
        seq += 1

    for slot, i in enumerate(order):
        plan = plans[i]
        clock = clock + timedelta(seconds=rng.uniform(1.0, 4.0))
        conversation, session, expected = build_trial(plan, config, rng, clock)
        expected_trials.append(expected)
        base = slot * 10.0
        positions: dict[str, float] = {"conversation": base + 5}
        place(positions["conversation"], conversation)
        if "session_missing" not in plan.quirks and plan.scenario.has_state_gate:
            if "session_early" in plan.quirks:
                positions["session"] = base + 4
            elif "session_late" in plan.quirks:
                positions["session"] = base + 10.0 * rng.randint(3, 8) + 7
            else:
                positions["session"] = base + 6
            place(positions["session"], session)
        if plan.duplicated_event:
            again = conversation if plan.duplicated_event == "conversation" else session
            place(positions[plan.duplicated_event] + 10.0 * rng.randint(1, 3) + 3, again)

    placed.sort(key=lambda item: (item[0], item[1]))
    expected_trials.sort(key=lambda t: t.trial_id)
    scenario_rows = [
        ExpectedScenario(
            scenario_id=s.id,
            k=s.k,
            n=sum(1 for t in expected_trials if t.scenario_id == s.id),
            passed=sum(
                1
                for t in expected_trials
                if t.scenario_id == s.id and t.expected_outcome == "passed"
            ),
        )
        for s in scenarios
    ]
    return Traffic(
        events=[event for _, _, event in placed],
        expected=Expected(run_id=config.run_id, trials=expected_trials, scenarios=scenario_rows),
    )


def generate_ending_by(
    scenarios: Sequence[Scenario], config: GenerateConfig, now: datetime
) -> Traffic:
    """The same traffic, moved back in time so that no event is dated after `now`.

    A run spreads its trials over minutes to hours of event time from `started_at`;
    started at the wall clock, most of a large run is dated ahead of the moment it is
    replayed, and passk refuses events dated past PASSK_MAX_CLOCK_SKEW_S ahead of their
    arrival (occurred_at_in_future). The times are start + seeded increments, so moving
    the start moves every event by the same amount and nothing else changes."""
    traffic = generate(scenarios, config)
    latest = max((e.occurred_at for e in traffic.events), default=config.started_at)
    if latest <= now:
        return traffic
    earlier = dataclasses.replace(config, started_at=config.started_at - (latest - now))
    return generate(scenarios, earlier)
