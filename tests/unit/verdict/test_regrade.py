"""A re-grade (a higher attempt) is assembled from its own results only, under a new id,
past the memory that drops repeats of the emitted attempt; older attempts are ignored."""

from __future__ import annotations

from services.grading.calibration import CalibrationBook, GatingPolicy
from services.verdict import domain
from tests.unit.factories import gate_result, judge_verdict, scenario

SC = scenario()
V = SC.version or ""
EVERY_JUDGE_GATES = {"policy": GatingPolicy(uncalibrated="gating"), "book": CalibrationBook()}


def checks(attempt: int, judges: tuple[str, str] = ("passed", "passed")) -> list:
    return [
        gate_result("exit", True, version=V).model_copy(update={"attempt": attempt}),
        gate_result("state", True, version=V).model_copy(update={"attempt": attempt}),
        *[
            judge_verdict(j, r, version=V).model_copy(update={"attempt": attempt})
            for j, r in zip(("covered_expected_topics", "avoided_repetition"), judges, strict=True)
        ],
    ]


def feed(state, events, now=0.0):
    for ev in events:
        if domain.is_duplicate(state, ev):
            continue
        if ev.type == "gate_result":
            state = domain.on_gate_result(state, ev, now)
        else:
            state = domain.on_judge_verdict(state, ev, now)
    return state


def emit(state):
    verdict = domain.assemble(
        state, SC, missing=domain.missing_checks(state, SC), waited_s=300, **EVERY_JUDGE_GATES
    )
    return verdict, domain.emitted(state, verdict, now=1.0)


def first_attempt_errored():
    """Attempt 1: gates in, no judge verdict before the deadline: error."""
    state = feed(None, checks(1)[:2])
    verdict, state = emit(state)
    assert verdict.outcome == "error" and verdict.attempt == 1
    assert verdict.event_id == "verdict:t1"
    return state


def test_the_emitted_attempt_drops_its_own_repeats_and_late_results() -> None:
    state = first_attempt_errored()
    late_judges = checks(1)[2:]
    assert all(domain.is_duplicate(state, ev) for ev in late_judges)


def test_a_higher_attempt_is_assembled_afresh_under_a_new_event_id() -> None:
    state = first_attempt_errored()
    second = checks(2)
    assert not any(domain.is_duplicate(state, ev) for ev in second)
    state = feed(state, second[:3])
    assert state.attempt == 2 and state.emitted_at is None
    # only attempt 2's results count: attempt 1's gates are not carried over
    assert domain.missing_checks(state, SC) == ["judge:avoided_repetition"]
    state = feed(state, second[3:])
    verdict, state = emit(state)
    assert verdict.outcome == "passed" and verdict.attempt == 2
    assert verdict.event_id == "verdict:t1:attempt-2"
    assert all(domain.is_duplicate(state, ev) for ev in second)  # its own repeats drop


def test_an_older_attempt_arriving_during_a_regrade_is_ignored() -> None:
    state = feed(first_attempt_errored(), checks(2)[:2])
    failing_old = judge_verdict("covered_expected_topics", "failed", version=V)
    assert domain.is_duplicate(state, failing_old)
    state = domain.on_judge_verdict(state, failing_old, 0.0)  # even if fed: not counted
    assert "covered_expected_topics@" + V not in state.judges


def test_a_regrade_of_a_trial_still_pending_supersedes_it() -> None:
    state = feed(None, checks(1)[:1])
    state = feed(state, checks(2))
    verdict, _ = emit(state)
    assert verdict.attempt == 2 and verdict.outcome == "passed"
