from __future__ import annotations

from services.gate import domain
from tests.unit.factories import conversation, session

TIMING = domain.Timing(session_wait_s=10, orphan_ttl_s=100, retention_s=1000)


def test_conversation_then_session_grades_with_both() -> None:
    d1 = domain.on_conversation(None, conversation(), now=0)
    assert d1.note == "waiting" and d1.grade is None
    d2 = domain.on_session(d1.state, session(), now=3)
    assert d2.note == "graded" and d2.grade is not None
    assert d2.grade.session is not None and d2.grade.waited_s == 3
    assert d2.state is not None and d2.state.graded_trial_ids == ["t1"]
    assert d2.state.conversation is None  # graded state keeps only what dedupe needs


def test_session_before_conversation_is_graded_normally() -> None:
    d1 = domain.on_session(None, session(), now=0)
    assert d1.note == "waiting"
    d2 = domain.on_conversation(d1.state, conversation(), now=1)
    assert d2.note == "graded" and d2.grade is not None and d2.grade.session is not None


def test_duplicate_conversation_while_waiting_and_after_grading() -> None:
    d1 = domain.on_conversation(None, conversation(), now=0)
    assert domain.on_conversation(d1.state, conversation(), now=1).note == "duplicate"
    d2 = domain.on_session(d1.state, session(), now=2)
    assert domain.on_conversation(d2.state, conversation(), now=3).note == "duplicate"
    assert domain.on_session(d2.state, session(), now=3).note == "duplicate"


def test_duplicate_session_event_while_waiting() -> None:
    d1 = domain.on_session(None, session(), now=0)
    assert domain.on_session(d1.state, session(), now=1).note == "duplicate"


def test_newer_session_state_replaces_the_held_one() -> None:
    d1 = domain.on_session(None, session(state={"a": 1}), now=0)
    d2 = domain.on_session(d1.state, session(state={"a": 2}, event_id="sp-2"), now=1)
    assert d2.note == "session_updated" and d2.state and d2.state.session
    assert d2.state.session.state == {"a": 2}


def test_missing_session_is_graded_at_the_deadline_without_session() -> None:
    d1 = domain.on_conversation(None, conversation(), now=0)
    assert d1.state is not None
    assert domain.due_at(d1.state, TIMING) == 10
    assert domain.on_tick(d1.state, now=9.9, timing=TIMING).note == "idle"
    d2 = domain.on_tick(d1.state, now=10, timing=TIMING)
    assert d2.note == "graded" and d2.grade is not None
    assert d2.grade.session is None and d2.grade.waited_s == 10
    # the session arriving after the deadline does not re-grade
    assert domain.on_session(d2.state, session(), now=11).note == "late_session"


def test_orphan_session_expires() -> None:
    d1 = domain.on_session(None, session(), now=0)
    assert d1.state is not None
    assert domain.on_tick(d1.state, now=99, timing=TIMING).note == "idle"
    d2 = domain.on_tick(d1.state, now=100, timing=TIMING)
    assert d2.note == "orphan_expired" and d2.state is None


def test_graded_marker_is_forgotten_after_retention() -> None:
    d = domain.on_session(domain.on_conversation(None, conversation(), 0).state, session(), 1)
    assert d.state is not None and domain.due_at(d.state, TIMING) == 1001
    assert domain.on_tick(d.state, now=1001, timing=TIMING).note == "forgotten"


def test_a_second_trial_on_a_session_being_joined_is_a_conflict() -> None:
    d1 = domain.on_conversation(None, conversation(), now=0)
    other = conversation(trial="t2", session_id="s-t1", event_id="cf-t2")
    assert domain.on_conversation(d1.state, other, now=1).note == "session_conflict"


def test_only_state_changing_notes_are_stored() -> None:
    assert "duplicate" not in domain.STATE_CHANGES and "idle" not in domain.STATE_CHANGES
    assert {"waiting", "graded", "orphan_expired"} <= domain.STATE_CHANGES


def test_only_a_graded_trial_with_nothing_pending_is_a_marker() -> None:
    from services.gate.domain import JoinState, is_marker

    assert is_marker(JoinState(session_id="s", graded_trial_ids=["t"], graded_at=5.0))
    assert not is_marker(JoinState(session_id="s"))


def test_a_second_trial_on_a_session_already_graded_is_a_conflict() -> None:
    graded = domain.on_session(
        domain.on_conversation(None, conversation(), 0).state, session(), 1
    ).state
    assert graded is not None and graded.graded_at is not None
    other = conversation(trial="t2", session_id="s-t1", event_id="cf-t2")
    d = domain.on_conversation(graded, other, now=2)
    assert d.note == "session_conflict" and d.grade is None and d.state == graded
    assert domain.joined_trial(graded) == "t1"
    # a repeat of the first trial is still only a repeat
    assert domain.on_conversation(graded, conversation(), now=3).note == "duplicate"


def test_the_trial_a_pending_session_is_joined_to() -> None:
    d1 = domain.on_conversation(None, conversation(), now=0)
    assert domain.joined_trial(d1.state) == "t1"
    assert domain.joined_trial(None) is None
    assert domain.joined_trial(domain.on_session(None, session(), 0).state) is None


# --- a SessionPersisted naming another trial than the session's (red team, issue 21) ---
import pytest  # noqa: E402

A = dict(trial="A", session_id="S", event_id="cf-A")
B = dict(trial="B", session_id="S", event_id="cf-B")
SP_A = dict(trial="A", session_id="S", event_id="sp-A", trial_id="A")
SP_B = dict(trial="B", session_id="S", event_id="sp-B", trial_id="B", state={})


def _feed(order: list[str]) -> tuple[list[domain.Decision], list[str]]:
    """Feed the events named in `order` (CF:A, SP:B, ...) through the join, as the gate does."""
    events = {
        "CF:A": conversation(**A),
        "CF:B": conversation(**B),
        "SP:A": session(**SP_A),
        "SP:B": session(**SP_B),
        "SP:-": session(trial="x", session_id="S", event_id="sp-none"),
    }
    state, decisions, notes = None, [], []
    for now, name in enumerate(order):
        event = events[name]
        if name.startswith("CF"):
            d = domain.on_conversation(state, event, float(now))
        else:
            d = domain.on_session(state, event, float(now))
        decisions.append(d)
        notes.append(d.note + ("+refused" if d.refused_session is not None else ""))
        if d.note in domain.STATE_CHANGES:
            state = d.state
    return decisions, notes


@pytest.mark.parametrize(
    "order, notes",
    [
        # the red team's order: A is joined, B's session comes, B's conversation, then A's session
        (
            ["CF:A", "SP:B", "CF:B", "SP:A"],
            ["waiting", "session_conflict", "session_conflict", "graded"],
        ),
        # B's session before any conversation: held, then dropped when A claims the session
        (
            ["SP:B", "CF:A", "CF:B", "SP:A"],
            ["waiting", "waiting+refused", "session_conflict", "graded"],
        ),
        (["SP:B", "CF:A", "SP:A"], ["waiting", "waiting+refused", "graded"]),
        # A's own session first: B's is refused, A graded on its own
        (["SP:A", "SP:B", "CF:A"], ["waiting", "session_conflict", "graded"]),
        (["CF:A", "SP:A", "SP:B"], ["waiting", "graded", "session_conflict"]),
        (
            ["CF:A", "SP:A", "CF:B", "SP:B"],
            ["waiting", "graded", "session_conflict", "session_conflict"],
        ),
    ],
)
def test_a_session_naming_another_trial_is_never_used_for_the_first(
    order: list[str], notes: list[str]
) -> None:
    decisions, seen = _feed(order)
    assert seen == notes
    grades = [d.grade for d in decisions if d.grade is not None]
    assert len(grades) == 1
    assert grades[0].conversation.trial_id == "A"
    assert grades[0].session is not None and grades[0].session.event_id == "sp-A"
    refused = [d.refused_session for d in decisions if d.refused_session is not None]
    assert [s.event_id for s in refused] == (["sp-B"] if "waiting+refused" in notes else [])


@pytest.mark.parametrize("order", [["CF:A", "SP:-"], ["SP:-", "CF:A"]])
def test_a_session_without_trial_id_joins_by_session_id_as_before(order: list[str]) -> None:
    decisions, seen = _feed(order)
    assert seen[-1] == "graded"
    grade = decisions[-1].grade
    assert grade is not None and grade.session is not None
    assert grade.session.event_id == "sp-none" and grade.conversation.trial_id == "A"


def test_the_trial_a_session_is_claimed_by() -> None:
    assert domain.claimed_by(None) is None
    held = domain.on_session(None, session(**SP_B), 0).state
    assert domain.claimed_by(held) == "B" and domain.joined_trial(held) is None
    assert domain.claimed_by(domain.on_session(None, session(), 0).state) is None


def test_timing_from_the_settings_keeps_an_orphan_session_an_hour_at_least() -> None:
    from services.contract.settings import Settings

    short = domain.Timing.of(Settings(PASSK_SESSION_WAIT_S=30, PASSK_DEDUP_RETENTION_S=500))
    assert (short.session_wait_s, short.orphan_ttl_s, short.retention_s) == (30, 3600, 500)
    long = domain.Timing.of(Settings(PASSK_SESSION_WAIT_S=600))
    assert long.orphan_ttl_s == 6000  # ten session waits
