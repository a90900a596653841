from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from schemas.events import ConversationFinished, SessionPersisted, count_turns
from schemas.scenario import Scenario
from services.contract.codec import Rejection, decode
from services.gate.expectations import check_expectation
from services.gate.gates import exit_checks
from services.replay.generate import (
    DEFAULT_QUIRK_RATES,
    FAILURE_MODES,
    QUIRKS,
    GenerateConfig,
    GenerateError,
    Traffic,
    generate,
    matching_string,
    passing_state,
)
from tests.unit.factories import scenario

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MARKER = re.compile(r"\[\[fail:([^\]]+)\]\]")


def rich_scenario(**overrides: Any) -> Scenario:
    """The factories' scenario with an expectation of every kind the generator must meet
    (an indexed path, a number, an anchored pattern) and one gating judge fewer."""
    return scenario(
        **{
            "limits": {"max_turns": 12, "max_duration_s": 900},
            "outcome": [
                {"path": "report.fault", "present": True},
                {"path": "report.parts", "present": True},
                {"path": "report.lines[1].code", "present": True},
                {
                    "path": "billability",
                    "equals": [{"code": "LAB-2H", "qty": 1}, {"code": "PART-PUMP", "qty": 1}],
                    "unordered": True,
                },
                {"path": "invoice.total", "equals": 180.0},
                {"path": "follow_up", "present": False},
                {"path": "report.summary", "matches": "(?i)replaced"},
                {"path": "report.ref", "matches": r"^WO-\d{6}$"},
            ],
            "judges": [
                {"id": "covered_expected_topics", "assertion": "Asked about fault and parts."},
                {"id": "polite", "assertion": "Was polite.", "gating": False},
            ],
            **overrides,
        }
    )


def plain_scenario(**overrides: Any) -> Scenario:
    body: dict[str, Any] = {
        "id": "debrief-warranty",
        "trials": 4,
        "expected_exit": ["product_closed", "handed_off"],
        "outcome": [{"path": "warranty.claim", "present": True}],
    }
    body.update(overrides)
    return Scenario.model_validate(body).versioned()


def config(**overrides: Any) -> GenerateConfig:
    body: dict[str, Any] = dict(run_id="run-7", started_at=START, seed=7)
    body.update(overrides)
    return GenerateConfig(**body)


def grade(traffic: Traffic, scenarios: list[Scenario]) -> dict[str, list[str]]:
    """Grade every trial from its events as the pipeline would (offline judge: markers)."""
    by_id = {s.id: s for s in scenarios}
    conversations = {e.session_id: e for e in traffic.events if isinstance(e, ConversationFinished)}
    sessions = {e.session_id: e for e in traffic.events if isinstance(e, SessionPersisted)}
    out: dict[str, list[str]] = {}
    for sid, conv in conversations.items():
        sc = by_id[conv.scenario_id]
        failed: set[str] = set()
        session = sessions.get(sid)
        if not all(c.passed for c in exit_checks(conv, sc, session)):
            failed.add("gate:exit")
        if not sc.has_state_gate:
            assert session is None, "no session is persisted without product-owned completion"
        elif session is None or not all(
            check_expectation(e, session.state).passed for e in sc.outcome
        ):
            failed.add("gate:state")
        gating = {j.id for j in sc.gating_judges}
        for m in conv.transcript:
            for judge in MARKER.findall(m.content or ""):
                if judge in gating:
                    failed.add(f"judge:{judge}")
        out[conv.trial_id] = sorted(failed)
    return out


# ------------------------------------------------------------------ determinism


def test_same_seed_same_bytes_and_another_seed_differs() -> None:
    scenarios = [rich_scenario(), plain_scenario()]
    a, b = generate(scenarios, config()), generate(scenarios, config())
    assert a.jsonl() == b.jsonl() and a.expected_json() == b.expected_json()
    c = generate(scenarios, config(seed=8))
    assert c.jsonl() != a.jsonl()


def test_ids_depend_on_the_run_so_two_runs_never_collide() -> None:
    scenarios = [plain_scenario()]
    a = generate(scenarios, config(run_id="run-a"))
    b = generate(scenarios, config(run_id="run-b"))
    assert not {e.event_id for e in a.events} & {e.event_id for e in b.events}
    assert not {t.session_id for t in a.expected.trials} & {t.session_id for t in b.expected.trials}


# ------------------------------------------------------------------ every mode


def test_every_mode_shows_every_failure_mode_and_quirk() -> None:
    scenarios = [rich_scenario(), plain_scenario()]
    traffic = generate(
        scenarios,
        config(every_mode=True, default_pass_prob=1.0, pass_prob={"debrief-billable-repair": 0.5}),
    )
    modes = {t.failure_mode for t in traffic.expected.trials}
    quirks = {q for t in traffic.expected.trials for q in t.quirks}
    assert set(FAILURE_MODES) <= modes
    assert set(QUIRKS) <= quirks
    # plain_scenario is declared always-passing: forced failures and missing sessions avoid it
    plain = [t for t in traffic.expected.trials if t.scenario_id == "debrief-warranty"]
    assert all(t.expected_outcome == "passed" for t in plain)


def test_every_mode_skips_what_no_scenario_can_show() -> None:
    # No limits, no judges, no present:false path: those modes are not applicable.
    traffic = generate([plain_scenario()], config(every_mode=True))
    modes = {t.failure_mode for t in traffic.expected.trials} - {None}
    assert modes == {"wrong_exit", "product_exit_wrong", "missing_field"}
    assert set(QUIRKS) <= {q for t in traffic.expected.trials for q in t.quirks}


def test_every_mode_adds_trials_when_k_is_too_small_for_all_modes() -> None:
    traffic = generate([rich_scenario(trials=1)], config(every_mode=True, pass_prob={}))
    assert set(FAILURE_MODES) <= {t.failure_mode for t in traffic.expected.trials}
    assert traffic.expected.scenarios[0].n == len(traffic.expected.trials) >= len(FAILURE_MODES)


# ------------------------------------------------------------------ states


@pytest.mark.parametrize("seed", range(5))
def test_passing_state_satisfies_every_expectation(seed: int) -> None:
    import random

    sc = rich_scenario()
    state = passing_state(sc, random.Random(seed))
    for exp in sc.outcome:
        assert check_expectation(exp, state).passed, exp.spec()
    # and read back directly, not only through the gate's own resolver
    assert state["report"]["fault"] and state["report"]["parts"]
    assert state["report"]["lines"][1]["code"]
    assert sorted(state["billability"], key=lambda x: x["code"]) == [
        {"code": "LAB-2H", "qty": 1},
        {"code": "PART-PUMP", "qty": 1},
    ]
    assert state["invoice"]["total"] == 180.0
    assert "follow_up" not in state
    assert re.search("(?i)replaced", state["report"]["summary"])
    assert re.fullmatch(r"WO-\d{6}", state["report"]["ref"])


def test_failing_trials_violate_exactly_their_target_and_nothing_else() -> None:
    scenarios = [rich_scenario(), plain_scenario()]
    traffic = generate(scenarios, config(every_mode=True, trials=8, default_pass_prob=0.5))
    graded = grade(traffic, scenarios)
    for trial in traffic.expected.trials:
        assert graded[trial.trial_id] == trial.expected_failed_checks, trial
        assert (trial.expected_outcome == "failed") == bool(trial.expected_failed_checks)
    sessions = {e.session_id: e for e in traffic.events if isinstance(e, SessionPersisted)}
    by_id = {s.id: s for s in scenarios}
    for trial in traffic.expected.trials:
        if trial.failure_mode in ("missing_field", "unexpected_follow_up"):
            state = sessions[trial.session_id].state
            failing = [
                e.path
                for e in by_id[trial.scenario_id].outcome
                if not check_expectation(e, state).passed
            ]
            assert failing == [trial.detail.removeprefix("state:")]


def test_failure_modes_look_like_what_they_claim() -> None:
    scenarios = [rich_scenario()]
    traffic = generate(scenarios, config(every_mode=True, default_pass_prob=0.0))
    convs = {e.trial_id: e for e in traffic.events if isinstance(e, ConversationFinished)}
    sessions = {e.session_id: e for e in traffic.events if isinstance(e, SessionPersisted)}
    for trial in traffic.expected.trials:
        conv = convs[trial.trial_id]
        assert conv.metrics and conv.metrics.turns == count_turns(conv.transcript)
        if trial.failure_mode == "wrong_exit":
            assert conv.exit_reason in ("persona_exhausted", "max_turns", "error")
        elif trial.failure_mode == "product_exit_wrong":
            assert conv.exit_reason == "product_closed"  # the harness saw a clean close
            if "session_missing" not in trial.quirks:
                assert sessions[trial.session_id].exit_reason in (
                    "persona_exhausted",
                    "max_turns",
                    "error",
                )
        elif trial.failure_mode == "over_turn_limit":
            assert count_turns(conv.transcript) > 12
        elif trial.failure_mode == "over_duration":
            assert conv.metrics.duration_ms > 900_000
        elif trial.failure_mode == "missing_field":
            closing = conv.transcript[-1]
            assert closing.role == "assistant" and "recorded" in (closing.content or "")
        markers = [j for m in conv.transcript for j in MARKER.findall(m.content or "")]
        if trial.failure_mode == "judge_failed":
            assert markers == ["covered_expected_topics"]
        else:
            assert markers == []


def test_passing_trials_stay_within_limits_and_close_cleanly() -> None:
    traffic = generate([rich_scenario()], config(default_pass_prob=1.0, trials=20))
    convs = [e for e in traffic.events if isinstance(e, ConversationFinished)]
    assert all(t.expected_outcome == "passed" for t in traffic.expected.trials)
    for conv in convs:
        assert conv.exit_reason == "product_closed"
        assert count_turns(conv.transcript) <= 12 and conv.metrics.duration_ms <= 900_000
        assert conv.transcript[0].role == "system"
        assert conv.transcript[-1].role == "assistant" and conv.transcript[-1].content
    tools = [m for c in convs for m in c.transcript if m.role == "tool"]
    assert tools, "some transcripts carry a tool call and its result"
    assert all(m.tool_call_id for m in tools)


def test_probability_zero_fails_every_trial_and_one_passes_every_trial() -> None:
    scenarios = [rich_scenario(), plain_scenario()]
    traffic = generate(
        scenarios,
        config(trials=10, pass_prob={"debrief-billable-repair": 0.0, "debrief-warranty": 1.0}),
    )
    outcomes = Counter((t.scenario_id, t.expected_outcome) for t in traffic.expected.trials)
    assert outcomes == {
        ("debrief-billable-repair", "failed"): 10,
        ("debrief-warranty", "passed"): 10,
    }
    rows = {r.scenario_id: r for r in traffic.expected.scenarios}
    assert rows["debrief-warranty"].passed == rows["debrief-warranty"].n == 10
    assert rows["debrief-billable-repair"].passed == 0


def test_trials_is_at_least_k() -> None:
    traffic = generate([plain_scenario(trials=4)], config(trials=2))
    assert traffic.expected.scenarios[0].n == 4
    traffic = generate([plain_scenario(trials=4)], config(trials=6))
    assert traffic.expected.scenarios[0].n == 6


# ------------------------------------------------------------------ quirks


def test_quirks_do_not_change_which_trials_fail_or_why() -> None:
    scenarios = [rich_scenario(), plain_scenario()]
    calm = {q: 0.0 for q in QUIRKS}
    busy = {"session_early": 0.3, "session_late": 0.3, "duplicated": 0.5, "session_missing": 0.0}
    a = generate(scenarios, config(trials=15, default_pass_prob=0.6, quirk_rates=calm))
    b = generate(scenarios, config(trials=15, default_pass_prob=0.6, quirk_rates=busy))
    assert any(t.quirks for t in b.expected.trials)
    assert [
        (t.trial_id, t.failure_mode, t.expected_outcome, t.expected_failed_checks)
        for t in a.expected.trials
    ] == [
        (t.trial_id, t.failure_mode, t.expected_outcome, t.expected_failed_checks)
        for t in b.expected.trials
    ]


def test_quirks_shape_the_file_as_named() -> None:
    traffic = generate([rich_scenario(), plain_scenario()], config(every_mode=True, trials=6))
    lines = traffic.jsonl().splitlines()
    rows = [json.loads(line) for line in lines]

    def positions(session_id: str, kind: str) -> list[int]:
        return [
            i for i, r in enumerate(rows) if r["session_id"] == session_id and r["type"] == kind
        ]

    for trial in traffic.expected.trials:
        conv = positions(trial.session_id, "conversation_finished")
        sess = positions(trial.session_id, "session_persisted")
        if "session_missing" in trial.quirks:
            assert sess == [] and trial.expected_outcome == "failed"
            assert "gate:state" in trial.expected_failed_checks
        elif "session_early" in trial.quirks:
            assert sess[0] < conv[0]
        elif "session_late" in trial.quirks:
            assert sess[0] > conv[0] + 1 or sess[0] == len(rows) - 1 or len(sess) > 1
        else:
            assert sess[0] > conv[0]
        if "duplicated" in trial.quirks:
            dup = conv if len(conv) == 2 else sess
            assert len(dup) == 2 and lines[dup[0]] == lines[dup[1]]
        else:
            assert len(conv) == 1 and len(sess) <= 1


def test_session_late_lands_several_lines_later() -> None:
    rates = {"session_early": 0.0, "session_late": 1.0, "duplicated": 0.0, "session_missing": 0.0}
    traffic = generate([plain_scenario(trials=30)], config(quirk_rates=rates))
    rows = [json.loads(line) for line in traffic.jsonl().splitlines()]
    gaps = []
    for trial in traffic.expected.trials[:10]:
        idx = [i for i, r in enumerate(rows) if r["session_id"] == trial.session_id]
        gaps.append(idx[1] - idx[0])
    assert min(gaps) >= 3


# ------------------------------------------------------------------ valid events


def test_every_line_is_a_valid_input_event_with_unique_ids() -> None:
    traffic = generate([rich_scenario(), plain_scenario()], config(every_mode=True, trials=5))
    models = {"conversation_finished": ConversationFinished, "session_persisted": SessionPersisted}
    seen: dict[str, str] = {}
    for line in traffic.jsonl().splitlines():
        kind = json.loads(line)["type"]
        event = decode(line.encode(), models[kind])
        assert not isinstance(event, Rejection), event
        assert event.run_id == "run-7"
        assert event.occurred_at.tzinfo is not None
        # an event id repeats only as the very same event (the duplicated quirk)
        assert seen.setdefault(event.event_id, line) == line
    trial_ids = [t.trial_id for t in traffic.expected.trials]
    session_ids = [t.session_id for t in traffic.expected.trials]
    assert len(set(trial_ids)) == len(trial_ids) and len(set(session_ids)) == len(session_ids)
    conv_trials = {
        json.loads(line)["trial_id"]
        for line in traffic.jsonl().splitlines()
        if '"conversation_finished"' in line
    }
    assert conv_trials == set(trial_ids)


def test_expected_json_has_the_documented_shape() -> None:
    traffic = generate([plain_scenario()], config())
    body = json.loads(traffic.expected_json())
    assert set(body) == {"run_id", "trials", "scenarios"}
    assert {
        "trial_id",
        "scenario_id",
        "session_id",
        "expected_outcome",
        "failure_mode",
        "quirks",
        "expected_failed_checks",
    } <= set(body["trials"][0])
    assert set(body["scenarios"][0]) == {"scenario_id", "k", "n", "passed"}


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        (
            [{"path": "a", "equals": 1}, {"path": "a.b", "present": True}],
            "cannot build a state",
        ),
    ],
)
def test_impossible_expectations_fail_clearly(outcome: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(GenerateError, match=re.escape(message)):
        generate([plain_scenario(outcome=outcome)], config())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"pass_prob": {"nope": 0.5}}, "unknown scenarios"),
        ({"default_pass_prob": 1.5}, "must be in [0, 1]"),
        ({"quirk_rates": {**DEFAULT_QUIRK_RATES, "lost": 0.1}}, "unknown quirks"),
        ({"started_at": datetime(2026, 1, 1)}, "timezone-aware"),
    ],
)
def test_bad_config_is_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(GenerateError, match=re.escape(message)):
        generate([plain_scenario()], config(**overrides))


def test_matching_string_prefers_prose_and_honours_anchors() -> None:
    import random

    rng = random.Random(1)
    prose = ["Replaced the pump", "Cleaned the filter"]
    assert matching_string("(?i)replaced", rng, where="x", prose=prose) == "Replaced the pump"
    value = matching_string(r"^(high|critical)$", rng, where="x", prose=prose)
    assert value in ("high", "critical")
    value = matching_string(r"WO-\d{4}", rng, where="x", prose=prose)
    assert re.fullmatch(r"(Replaced the pump|Cleaned the filter) \(WO-\d{4}\)", value)


def test_every_mode_puts_forced_failures_on_the_flakiest_scenario() -> None:
    flaky, steady = rich_scenario(), rich_scenario(id="steady-twin")
    calm = {q: 0.0 for q in QUIRKS}
    traffic = generate(
        [steady, flaky],
        config(
            every_mode=True,
            trials=8,
            quirk_rates=calm,
            pass_prob={"debrief-billable-repair": 0.99, "steady-twin": 1.0},
        ),
    )
    steady_trials = [t for t in traffic.expected.trials if t.scenario_id == "steady-twin"]
    assert all(t.expected_outcome == "passed" for t in steady_trials)
    traffic = generate(
        [steady, flaky],
        config(
            every_mode=True,
            trials=8,
            quirk_rates=calm,
            pass_prob={"debrief-billable-repair": 0.3, "steady-twin": 0.999},
            seed=3,
        ),
    )
    by_scenario = Counter(t.scenario_id for t in traffic.expected.trials if t.failure_mode)
    modes_on_flaky = {
        t.failure_mode
        for t in traffic.expected.trials
        if t.scenario_id == "debrief-billable-repair"
    }
    assert set(FAILURE_MODES) <= modes_on_flaky
    assert by_scenario["steady-twin"] <= 1  # only what its own 0.1% draw gives


def test_some_products_record_their_exit_and_some_leave_it_to_the_harness() -> None:
    traffic = generate([rich_scenario()], config(default_pass_prob=1.0, trials=20))
    sessions = [e for e in traffic.events if isinstance(e, SessionPersisted)]
    recorded = [s.exit_reason for s in sessions if s.exit_reason is not None]
    assert 0 < len(recorded) < len(sessions)
    assert set(recorded) == {"product_closed"}


def test_a_conversation_completion_scenario_gets_no_session_and_no_state_failure() -> None:
    chat = Scenario.model_validate(
        {
            "id": "chat-only",
            "trials": 3,
            "expected_exit": "product_closed",
            "completion": "conversation",
            "judges": [{"id": "polite", "assertion": "Was polite."}],
        }
    ).versioned()
    scenarios = [chat, rich_scenario()]
    traffic = generate(scenarios, config(every_mode=True, default_pass_prob=0.3, trials=8))
    chat_sessions = {t.session_id for t in traffic.expected.trials if t.scenario_id == "chat-only"}
    assert not [
        e
        for e in traffic.events
        if isinstance(e, SessionPersisted) and e.session_id in chat_sessions
    ]
    chat_trials = [t for t in traffic.expected.trials if t.scenario_id == "chat-only"]
    assert chat_trials and all("gate:state" not in t.expected_failed_checks for t in chat_trials)
    assert all(not set(t.quirks) - {"duplicated"} for t in chat_trials)
    assert {t.failure_mode for t in chat_trials} - {None} <= {"wrong_exit", "judge_failed"}
    graded = grade(traffic, scenarios)
    for trial in traffic.expected.trials:
        assert graded[trial.trial_id] == trial.expected_failed_checks, trial


def test_the_plan_says_whose_exit_the_gate_must_check() -> None:
    scenarios = [rich_scenario()]
    traffic = generate(scenarios, config(every_mode=True, default_pass_prob=0.5, trials=20))
    sessions = {e.session_id: e for e in traffic.events if isinstance(e, SessionPersisted)}
    for trial in traffic.expected.trials:
        session = sessions.get(trial.session_id)
        recorded = session is not None and session.exit_reason is not None
        assert trial.expected_exit_source == ("session" if recorded else "harness"), trial
    assert {t.expected_exit_source for t in traffic.expected.trials} == {"session", "harness"}


@pytest.mark.parametrize(
    ("spec", "state", "held"),
    [
        ({"path": "a.b", "present": True}, {"a": {"b": "x"}}, True),
        ({"path": "a.b", "present": True}, {"a": {"b": ""}}, False),
        ({"path": "a.b", "present": False}, {"a": {}}, True),
        ({"path": "a.b", "present": False}, {"a": {"b": [1]}}, False),
        ({"path": "l[1]", "equals": 2}, {"l": [1, 2]}, True),
        ({"path": "l", "equals": [1, 2], "unordered": True}, {"l": [2, 1]}, True),
        ({"path": "l", "equals": [1, 2]}, {"l": [2, 1]}, False),
        ({"path": "s", "matches": "^re"}, {"s": "replaced"}, True),
        ({"path": "s", "matches": "^re"}, {"s": 3}, False),
        ({"path": "missing", "equals": None}, {}, False),
    ],
)
def test_the_generator_reads_its_own_states_without_the_gate(spec, state, held) -> None:
    # The generator's plain check is what its states are built against; the gate under
    # test never decides an expected outcome.
    from schemas.scenario import Expectation
    from services.replay.generate import holds

    assert holds(Expectation(**spec), state) is held


def test_advisory_judges_are_flagged_but_never_a_failure_mode() -> None:
    scenarios = [rich_scenario()]
    traffic = generate(
        scenarios,
        config(
            trials=40,
            every_mode=True,
            default_pass_prob=0.5,
            advisory_flags={"covered_expected_topics": 0.5},
        ),
    )
    conversations = {e.trial_id: e for e in traffic.events if isinstance(e, ConversationFinished)}
    flagged = 0
    for t in traffic.expected.trials:
        assert t.failure_mode != "judge_failed"  # the advisory judge was its only target
        assert "judge:covered_expected_topics" not in t.expected_failed_checks
        said = " ".join(m.content or "" for m in conversations[t.trial_id].transcript)
        marked = "[[fail:covered_expected_topics]]" in said
        assert marked == (t.advisory_flagged == ["covered_expected_topics"])
        flagged += marked
    assert 5 < flagged < 35  # about half of 40


def test_advisory_flags_for_unknown_judges_are_refused() -> None:
    with pytest.raises(GenerateError, match="unknown judges"):
        generate([rich_scenario()], config(advisory_flags={"nobody": 0.5}))


def test_a_scenario_naming_external_checks_gets_them_reported_passing() -> None:
    from services.gate.external import external_results

    named = plain_scenario(external_checks=["pii_scan", "tool_budget"])
    traffic = generate([named], config(every_mode=True))
    conversations = [e for e in traffic.events if isinstance(e, ConversationFinished)]
    assert conversations
    for conv in conversations:
        results = external_results(conv, named)
        assert [(r.check, r.passed, r.reported) for r in results] == [
            ("external:pii_scan", True, True),
            ("external:tool_budget", True, True),
        ]
    # a scenario naming none is generated exactly as before: no checks at all
    assert all(
        not e.checks
        for e in generate([plain_scenario()], config()).events
        if isinstance(e, ConversationFinished)
    )


def test_a_run_generated_to_end_by_now_dates_no_event_after_now() -> None:
    """CI found it: 2,000 trials started at the wall clock spread 40 min of event time
    ahead, and the pipeline (rightly) dead-lettered most of them as occurred_at_in_future."""
    from services.replay.generate import generate_ending_by

    scenarios = [plain_scenario()]
    cfg = config(trials=300)
    ahead = generate(scenarios, cfg)
    assert max(e.occurred_at for e in ahead.events) > START + timedelta(minutes=10)
    moved = generate_ending_by(scenarios, cfg, now=START)
    times = [e.occurred_at for e in moved.events]
    assert max(times) == START  # ends exactly at now, nothing after it
    shift = ahead.events[0].occurred_at - moved.events[0].occurred_at
    # the same run, every event moved back by the same amount
    assert [e.occurred_at for e in ahead.events] == [t + shift for t in times]
    assert [(t.trial_id, t.expected_outcome) for t in moved.expected.trials] == [
        (t.trial_id, t.expected_outcome) for t in ahead.expected.trials
    ]
    # a run that already ends in the past is left as it is
    assert generate_ending_by(scenarios, cfg, now=START + timedelta(days=1)).events == ahead.events
