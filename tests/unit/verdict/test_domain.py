from __future__ import annotations

import pytest

from services.grading.calibration import CalibrationBook, GatingPolicy
from services.verdict import domain
from tests.unit.factories import gate_result, judge_verdict, scenario

SC = scenario()
V = SC.version or ""
GATING = ["covered_expected_topics", "avoided_repetition"]
# These tests are about assembling an outcome, not calibration: every judge may gate.
EVERY_JUDGE_GATES = {"policy": GatingPolicy(uncalibrated="gating"), "book": CalibrationBook()}


def collect(*events):
    state = None
    for ev in events:
        if ev.type == "gate_result":
            state = domain.on_gate_result(state, ev, now=0)
        else:
            state = domain.on_judge_verdict(state, ev, now=0)
    return state


def all_checks(exit_ok=True, state_ok=True, judges=("passed", "passed")):
    return [
        gate_result("exit", exit_ok, version=V),
        gate_result("state", state_ok, version=V),
        *[judge_verdict(j, r, version=V) for j, r in zip(GATING, judges, strict=True)],
    ]


def test_waits_until_both_gates_and_every_gating_judge() -> None:
    events = all_checks()
    for i in range(len(events)):
        state = collect(*events[:i])
        if state is not None:
            assert domain.missing_checks(state, SC), f"complete after only {i} events"
    assert domain.missing_checks(collect(*events), SC) == []


def test_non_gating_judges_are_not_awaited() -> None:
    state = collect(*all_checks())
    assert "judge:polite" not in domain.missing_checks(state, SC)


@pytest.mark.parametrize(
    ("exit_ok", "state_ok", "judges", "outcome", "failed"),
    [
        (True, True, ("passed", "passed"), "passed", []),
        (False, True, ("passed", "passed"), "failed", ["gate:exit"]),
        (True, False, ("passed", "passed"), "failed", ["gate:state"]),
        (True, True, ("failed", "passed"), "failed", ["judge:covered_expected_topics"]),
        (True, True, ("error", "passed"), "error", ["judge:covered_expected_topics"]),
        # a definite failure outranks an error; the errored check is still listed
        (
            False,
            True,
            ("error", "passed"),
            "failed",
            ["gate:exit", "judge:covered_expected_topics"],
        ),
        (
            False,
            False,
            ("failed", "failed"),
            "failed",
            [
                "gate:exit",
                "gate:state",
                "judge:covered_expected_topics",
                "judge:avoided_repetition",
            ],
        ),
    ],
)
def test_and_never_or(exit_ok, state_ok, judges, outcome, failed) -> None:
    state = collect(*all_checks(exit_ok, state_ok, judges))
    verdict = domain.assemble(state, SC, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    assert verdict.outcome == outcome
    assert [c.check for c in verdict.failed_checks] == failed
    assert verdict.event_id == "verdict:t1" and verdict.k == 3


def test_missing_judge_at_deadline_is_an_error_naming_it() -> None:
    state = collect(*all_checks()[:3])
    missing = domain.missing_checks(state, SC)
    assert missing == ["judge:avoided_repetition"]
    verdict = domain.assemble(state, SC, missing=missing, waited_s=300, **EVERY_JUDGE_GATES)
    assert verdict.outcome == "error"
    assert verdict.failed_checks[-1].check == "judge:avoided_repetition"
    assert "no result within 300 s" in verdict.failed_checks[-1].reason


def test_judge_verdict_of_another_scenario_version_does_not_count() -> None:
    state = collect(*all_checks()[:3], judge_verdict("avoided_repetition", version="old"))
    assert domain.missing_checks(state, SC) == ["judge:avoided_repetition"]


def test_scenario_without_judges_needs_only_the_gates() -> None:
    bare = scenario(judges=[])
    state = collect(
        gate_result("exit", version=bare.version or ""),
        gate_result("state", version=bare.version or ""),
    )
    assert domain.missing_checks(state, bare) == []
    verdict = domain.assemble(state, bare, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    assert verdict.outcome == "passed"


def test_emitted_state_drops_later_events() -> None:
    state = collect(*all_checks())
    verdict = domain.assemble(state, SC, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    done = domain.emitted(state, verdict, now=5)
    assert domain.is_duplicate(done) and done.gates == {} and done.emitted_outcome == "passed"
    again = domain.on_gate_result(done, gate_result("exit", False, version=V), now=6)
    assert again.gates == {}


def test_deadlines() -> None:
    timing = domain.Timing(judge_wait_s=30, gate_wait_s=10, retention_s=100)
    only_judge = domain.on_judge_verdict(None, judge_verdict("x", version=V), now=0)
    assert domain.due_at(only_judge, timing) == 40
    gates = collect(gate_result("exit", version=V), gate_result("state", version=V))
    assert gates.gates_complete_at == 0 and domain.due_at(gates, timing) == 30


def test_verdict_carries_trial_facts_from_the_gates() -> None:
    state = collect(*all_checks())
    verdict = domain.assemble(state, SC, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    assert verdict.exit_reason == "product_closed" and verdict.scenario_version == V


def test_a_conversation_completion_trial_needs_no_state_gate() -> None:
    sc = scenario(completion="conversation", outcome=[])
    version = sc.version or ""
    exit_only = domain.on_gate_result(
        None,
        gate_result(
            "exit", True, version=version, completion="conversation", exit_source="harness"
        ),
        now=0,
    )
    state = exit_only
    for j in GATING:
        state = domain.on_judge_verdict(state, judge_verdict(j, version=version), now=0)
    assert domain.missing_checks(state, sc) == []
    verdict = domain.assemble(state, sc, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    assert verdict.outcome == "passed" and verdict.checks_passed[0] == "gate:exit"
    assert verdict.completion == "conversation" and verdict.exit_source == "harness"


def test_a_product_completion_trial_still_waits_for_the_state_gate() -> None:
    state = domain.on_gate_result(None, gate_result("exit", True, version=V), now=0)
    assert domain.missing_checks(state, SC) == ["gate:state"]


def test_the_verdict_carries_whose_exit_was_checked() -> None:
    events = [
        gate_result(
            "exit", False, version=V, exit_reason="persona_exhausted", exit_source="session"
        ),
        gate_result("state", True, version=V),
        *[judge_verdict(j, version=V) for j in GATING],
    ]
    verdict = domain.assemble(collect(*events), SC, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    assert verdict.outcome == "failed"
    assert (verdict.exit_reason, verdict.exit_source) == ("persona_exhausted", "session")


def test_advisory_judges_are_recorded_and_never_fail_nor_error_a_trial() -> None:
    from services.grading.calibration import Bar, calibration_event, judge_version
    from services.grading.calibration import Matrix as M

    good = judge_version("covered_expected_topics", "a", "p", "m")
    book = CalibrationBook(
        [
            calibration_event(
                judge_id="covered_expected_topics",
                version=good,
                matrix=M(tp=11, fp=2, fn=1, tn=6),
                bar=Bar(),
                source="set",
                assertion="a",
                prompt_hash="p",
                model="m",
                dimension=None,
                event_id="c1",
            )
        ]
    )
    events = [
        gate_result("exit", version=V),
        gate_result("state", version=V),
        judge_verdict("covered_expected_topics", "failed", version=V).model_copy(
            update={"judge_version": good}
        ),
        judge_verdict("avoided_repetition", "error", version=V).model_copy(
            update={"judge_version": "never-calibrated"}
        ),
        judge_verdict("polite", "failed", version=V, gating=False),
    ]
    verdict = domain.assemble(
        collect(*events), SC, missing=[], waited_s=0, policy=GatingPolicy(), book=book
    )
    assert verdict.outcome == "failed"
    assert [c.check for c in verdict.failed_checks] == ["judge:covered_expected_topics"]
    assert verdict.gating_judges == ["covered_expected_topics"]
    assert [(a.judge_id, a.why, a.result) for a in verdict.advisory_judges] == [
        ("avoided_repetition", "uncalibrated", "error"),
        ("polite", "gating: false in the scenario", "failed"),
    ]
    # the same trial with no calibration at all: nothing may fail it
    alone = domain.assemble(
        collect(*events), SC, missing=[], waited_s=0, policy=GatingPolicy(), book=CalibrationBook()
    )
    assert alone.outcome == "passed" and alone.gating_judges == []


# ------------------------------------------------------------------ deadline ticks
TIMING = domain.Timing(judge_wait_s=300.0, gate_wait_s=120.0, retention_s=86_400.0)


def test_a_tick_before_the_deadline_waits() -> None:
    state = collect(gate_result("exit", True, version=V), gate_result("state", True, version=V))
    # both gates in at 0: the judges have until 300
    assert domain.on_tick(state, 299.9, TIMING, SC).action == "wait"


def test_a_tick_at_the_judge_deadline_emits_with_the_missing_judges_as_errors() -> None:
    state = collect(
        gate_result("exit", True, version=V),
        gate_result("state", True, version=V),
        judge_verdict(GATING[0], "passed", version=V),
    )
    decision = domain.on_tick(state, 300.0, TIMING, SC)
    assert (decision.action, decision.missing, decision.waited_s) == (
        "emit",
        [f"judge:{GATING[1]}"],
        300.0,
    )


def test_without_both_gates_the_wait_is_for_the_gates_and_then_the_judges() -> None:
    state = collect(judge_verdict(GATING[0], "passed", version=V))
    assert domain.on_tick(state, 419.0, TIMING, SC).action == "wait"
    decision = domain.on_tick(state, 420.0, TIMING, SC)
    assert (decision.action, decision.waited_s) == ("emit", 420.0)
    assert decision.missing == ["gate:exit", "gate:state"]


def test_an_emitted_trial_is_remembered_for_the_retention_then_forgotten() -> None:
    state = collect(*all_checks())
    verdict = domain.assemble(state, SC, missing=[], waited_s=0.0, **EVERY_JUDGE_GATES)
    done = domain.emitted(state, verdict, now=1_000.0)
    assert domain.on_tick(done, 1_000.0 + 86_399.0, TIMING, SC).action == "wait"
    assert domain.on_tick(done, 1_000.0 + 86_400.0, TIMING, SC).action == "forget"


def test_a_skipped_judge_is_awaited_no_longer_and_counts_as_neither_fail_nor_error() -> None:
    events = [
        gate_result("exit", version=V),
        gate_result("state", False, version=V),
        *[judge_verdict(j, "skipped", version=V) for j in GATING],
    ]
    state = collect(*events)
    assert domain.missing_checks(state, SC) == []  # nothing left to wait for
    verdict = domain.assemble(state, SC, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    assert verdict.outcome == "failed"
    assert [fc.check for fc in verdict.failed_checks] == ["gate:state"]
    assert verdict.skipped_judges == GATING and verdict.gating_judges == []


# ------------------------------------------- trial identity conflicts (issue 21, item 2)
def test_a_trial_id_reused_by_another_run_scenario_or_session_is_a_conflict() -> None:
    first = collect(gate_result("exit", version=V))
    same = judge_verdict(GATING[0], version=V)
    assert domain.identity_conflict(None, same) is None
    assert domain.identity_conflict(first, same) is None
    for change in ({"run_id": "run-B"}, {"scenario_id": "S2"}, {"session_id": "other"}):
        second = same.model_copy(update=change)
        why = domain.identity_conflict(first, second)
        assert why is not None and "'t1'" in why
        assert "'run-1'" in why and "'s-t1'" in why  # the first trial's ids
        assert next(iter(change.values())) in why  # and the second's


def test_the_first_trial_is_graded_as_if_the_second_never_came() -> None:
    """The processor drops every result with a conflict before it touches the state: the
    verdict assembled from what is left is the first trial's own."""
    run_b = [
        e.model_copy(update={"run_id": "run-B", "session_id": "s-B", "event_id": e.event_id + ":B"})
        for e in all_checks(judges=("failed", "failed"))
    ]
    mixed: list = []
    state = None
    for ours, theirs in zip(all_checks(), run_b, strict=True):
        for ev in (theirs, ours) if len(mixed) % 2 else (ours, theirs):
            mixed.append(ev)
            if domain.identity_conflict(state, ev):
                continue
            state = (
                domain.on_gate_result(state, ev, now=0)
                if ev.type == "gate_result"
                else domain.on_judge_verdict(state, ev, now=0)
            )
    assert state is not None and state.run_id == "run-1"
    assert domain.missing_checks(state, SC) == []
    verdict = domain.assemble(state, SC, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    alone = domain.assemble(collect(*all_checks()), SC, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    assert verdict.model_dump(exclude={"occurred_at"}) == alone.model_dump(exclude={"occurred_at"})
    assert verdict.outcome == "passed"
    emitted = domain.emitted(state, verdict, now=5)  # remembered as emitted: still known
    assert domain.identity_conflict(emitted, run_b[0]) is not None


def test_timing_from_the_settings_waits_for_the_gates_as_long_as_for_a_session() -> None:
    from services.contract.settings import Settings

    timing = domain.Timing.of(
        Settings(PASSK_JUDGE_WAIT_S=45, PASSK_SESSION_WAIT_S=20, PASSK_DEDUP_RETENTION_S=700)
    )
    assert (timing.judge_wait_s, timing.gate_wait_s, timing.retention_s) == (45, 20, 700)


# ------------------------------------------------------------------ user checks

USER_SC = scenario(
    user={"persona": "A technician.", "instructions": "Job 4112."},
    user_checks=[
        {
            "id": "in_role",
            "kind": "regex",
            "pattern": "help you",
            "must_match": False,
            "role": "user",
        },
        {"id": "no_answer", "assertion": "Did not give it away."},
    ],
)
UV = USER_SC.version or ""


def user_checks(in_role: str = "passed", no_answer: str = "passed") -> list:
    checks = [
        gate_result("exit", True, version=UV),
        gate_result("state", True, version=UV),
        *[judge_verdict(j, "passed", version=UV) for j in GATING],
    ]
    det = judge_verdict("user:in_role", in_role, version=UV)
    det = det.model_copy(update={"judge_kind": "regex"})
    return [*checks, det, judge_verdict("user:no_answer", no_answer, version=UV)]


def test_every_user_check_is_awaited() -> None:
    state = collect(*user_checks()[:-1])
    assert domain.missing_checks(state, USER_SC) == ["user:no_answer"]
    assert domain.missing_checks(collect(*user_checks()), USER_SC) == []


@pytest.mark.parametrize(
    ("in_role", "no_answer", "agent_ok", "outcome", "failed"),
    [
        ("passed", "passed", True, "passed", []),
        # a user that broke role spoils the trial, whatever the agent's checks said
        ("failed", "passed", True, "invalid", ["user:in_role"]),
        ("failed", "passed", False, "invalid", ["user:in_role", "gate:exit"]),
        ("passed", "failed", True, "invalid", ["user:no_answer"]),
        # a user check that could not be made is an error like any check
        ("error", "passed", True, "error", ["user:in_role"]),
    ],
)
def test_a_failed_user_check_makes_the_trial_invalid(
    in_role, no_answer, agent_ok, outcome, failed
) -> None:
    events = user_checks(in_role, no_answer)
    if not agent_ok:
        events[0] = gate_result("exit", False, version=UV)
    verdict = domain.assemble(
        collect(*events), USER_SC, missing=[], waited_s=0, **EVERY_JUDGE_GATES
    )
    assert verdict.outcome == outcome
    assert [c.check for c in verdict.failed_checks] == failed
    if outcome == "passed":
        assert {"user:in_role", "user:no_answer"} <= set(verdict.checks_passed)


def test_an_uncalibrated_llm_user_check_is_advisory_and_spoils_nothing() -> None:
    verdict = domain.assemble(
        collect(*user_checks("passed", "failed")),
        USER_SC,
        missing=[],
        waited_s=0,
        policy=GatingPolicy(),
        book=CalibrationBook(),
    )
    # the deterministic check gates; the LLM one is recorded as advisory (and so are the
    # scenario's uncalibrated LLM judges)
    assert verdict.outcome == "passed"
    assert "user:in_role" in verdict.checks_passed
    assert [
        (a.judge_id, a.result) for a in verdict.advisory_judges if a.judge_id.startswith("user:")
    ] == [("user:no_answer", "failed")]


def test_an_unsampled_production_trial_waits_for_no_llm_judge() -> None:
    gates = [
        gate_result("exit", True, version=V, sampled=False),
        gate_result("state", True, version=V, sampled=False),
    ]
    state = collect(*gates)
    assert domain.missing_checks(state, SC) == []  # never waited for
    verdict = domain.assemble(state, SC, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    assert verdict.outcome == "passed" and verdict.sampled is False
    assert verdict.not_sampled_judges == [j.id for j in SC.judges if j.kind == "llm"]
    # a not_sampled verdict that did arrive is listed the same way, never as a pass
    state = collect(*gates, *[judge_verdict(j, "not_sampled", version=V) for j in GATING])
    verdict = domain.assemble(state, SC, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    assert verdict.outcome == "passed" and not any(
        c.startswith("judge:") for c in verdict.checks_passed
    )
    # a sampled trial still waits for every gating judge
    state = collect(gate_result("exit", True, version=V), gate_result("state", True, version=V))
    assert domain.missing_checks(state, SC) == [f"judge:{j}" for j in GATING]
    assert domain.assemble(state, SC, missing=[], waited_s=0, **EVERY_JUDGE_GATES).sampled is True
