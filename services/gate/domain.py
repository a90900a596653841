"""Joining a trial's two input events by session_id: (state, event, now) -> decision.

The conversation and the persisted session arrive in either order, seconds apart,
twice, or one of them never. This module decides, for each arrival and each clock
tick, what the per-session state becomes and whether the trial is ready to grade.
It never grades itself (see gates.py) and never touches Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, Field

from schemas.events import ConversationFinished, SessionPersisted
from services.contract.codec import Rejection
from services.contract.settings import Settings

Note = Literal[
    "waiting",  # stored; the other half has not arrived
    "graded",  # both gates can be computed now
    "duplicate",  # already seen; nothing to do
    "late_session",  # the session came after grading: past the deadline, or not waited for
    "session_updated",  # a newer persisted state replaced the one held
    "session_conflict",  # a second, different trial claims a session still being joined
    "orphan_expired",  # a persisted session whose conversation never came
    "forgotten",  # a graded trial's marker is past retention
    "idle",  # a tick with nothing due
]

# The decisions after which the stored state must be written (or deleted).
STATE_CHANGES: frozenset[str] = frozenset(
    {"waiting", "graded", "session_updated", "orphan_expired", "forgotten"}
)


class JoinState(BaseModel):
    session_id: str
    conversation: ConversationFinished | None = None
    session: SessionPersisted | None = None
    conversation_seen_at: float | None = None
    session_seen_at: float | None = None
    # Kept after grading so a redelivered or replayed trial is recognised.
    graded_trial_ids: list[str] = Field(default_factory=list)
    graded_at: float | None = None
    graded_without_session: bool = False


@dataclass(frozen=True)
class Grade:
    conversation: ConversationFinished
    session: SessionPersisted | None
    waited_s: float


@dataclass(frozen=True)
class Decision:
    state: JoinState | None  # None: forget the key
    note: Note
    grade: Grade | None = None
    # A held SessionPersisted naming another trial, dropped from the join when this
    # trial's conversation claimed the session: to the dead letters (session_conflict).
    refused_session: SessionPersisted | None = None


@dataclass(frozen=True)
class Timing:
    session_wait_s: float
    orphan_ttl_s: float
    retention_s: float

    @classmethod
    def of(cls, settings: Settings) -> Timing:
        # A persisted session waits for its conversation ten session waits, an hour at least.
        return cls(
            session_wait_s=settings.session_wait_s,
            orphan_ttl_s=max(10 * settings.session_wait_s, 3600.0),
            retention_s=settings.dedup_retention_s,
        )


def _graded(state: JoinState, grade: Grade, now: float) -> Decision:
    done = JoinState(
        session_id=state.session_id,
        graded_trial_ids=[*state.graded_trial_ids, grade.conversation.trial_id],
        graded_at=now,
        graded_without_session=grade.session is None,
    )
    return Decision(done, "graded", grade)


def on_conversation(
    state: JoinState | None,
    event: ConversationFinished,
    now: float,
    *,
    wait_for_session: bool = True,
) -> Decision:
    """`wait_for_session` False (a scenario with `completion: conversation`): grade at
    once, with the session only if it already came; none is waited for."""
    state = state or JoinState(session_id=event.session_id)
    if event.trial_id in state.graded_trial_ids:
        return Decision(state, "duplicate")
    if state.conversation is not None:
        if state.conversation.trial_id == event.trial_id:
            return Decision(state, "duplicate")
        return Decision(state, "session_conflict")
    if state.graded_trial_ids:
        # A session already joined to a graded trial: a second trial claiming it would be
        # graded against the first's session (or none), so it is refused, as while pending.
        return Decision(state, "session_conflict")
    refused = None
    if state.session is not None and not _belongs(state.session, event.trial_id):
        # The session held names another trial: this trial is not graded on it (the first
        # conversation owns the session); it waits for its own.
        refused = state.session
        state = state.model_copy(update={"session": None, "session_seen_at": None})
    state = state.model_copy(update={"conversation": event, "conversation_seen_at": now})
    if refused is not None:
        if not wait_for_session:
            return replace(_graded(state, Grade(event, None, 0.0), now), refused_session=refused)
        return Decision(state, "waiting", refused_session=refused)
    if state.session is not None:
        seen = state.session_seen_at if state.session_seen_at is not None else now
        return _graded(state, Grade(event, state.session, max(now - seen, 0.0)), now)
    if not wait_for_session:
        return _graded(state, Grade(event, None, 0.0), now)
    return Decision(state, "waiting")


def joined_trial(state: JoinState | None) -> str | None:
    """The trial a session is joined to (pending or graded), if any."""
    if state is None:
        return None
    if state.conversation is not None:
        return state.conversation.trial_id
    return state.graded_trial_ids[-1] if state.graded_trial_ids else None


def _belongs(session: SessionPersisted, trial_id: str) -> bool:
    """A SessionPersisted without trial_id belongs to whichever trial the session joins."""
    return session.trial_id is None or session.trial_id == trial_id


def claimed_by(state: JoinState | None) -> str | None:
    """The trial a session is joined to, or will be: the pending or graded conversation's,
    else the trial named by the session already held."""
    joined = joined_trial(state)
    if joined is None and state is not None and state.session is not None:
        return state.session.trial_id
    return joined


def on_session(state: JoinState | None, event: SessionPersisted, now: float) -> Decision:
    """A SessionPersisted naming another trial than the one the session is joined to (or,
    before any conversation, than the one a held session names) is a conflict: never used
    for that trial. Without trial_id it is joined by session id alone."""
    state = state or JoinState(session_id=event.session_id)
    owner = claimed_by(state)
    if (
        event.trial_id is not None
        and owner is not None
        and owner != event.trial_id
        and event.trial_id not in state.graded_trial_ids
    ):
        return Decision(state, "session_conflict")
    if state.graded_at is not None:
        if state.graded_without_session:
            return Decision(state, "late_session")
        return Decision(state, "duplicate")
    if state.session is not None:
        if state.session.event_id == event.event_id:
            return Decision(state, "duplicate")
        note: Note = "session_updated"
    else:
        note = "waiting"
    state = state.model_copy(update={"session": event, "session_seen_at": now})
    if state.conversation is not None:
        seen = state.conversation_seen_at if state.conversation_seen_at is not None else now
        return _graded(state, Grade(state.conversation, event, max(now - seen, 0.0)), now)
    return Decision(state, note)


def on_tick(state: JoinState, now: float, timing: Timing) -> Decision:
    if state.graded_at is not None:
        if now - state.graded_at >= timing.retention_s:
            return Decision(None, "forgotten")
        return Decision(state, "idle")
    if state.conversation is not None and state.conversation_seen_at is not None:
        if now - state.conversation_seen_at >= timing.session_wait_s:
            grade = Grade(state.conversation, None, timing.session_wait_s)
            return _graded(state, grade, now)
        return Decision(state, "idle")
    if state.session_seen_at is not None and now - state.session_seen_at >= timing.orphan_ttl_s:
        return Decision(None, "orphan_expired")
    return Decision(state, "idle")


def due_at(state: JoinState, timing: Timing) -> float | None:
    """When a tick next has something to do for this state (None: never)."""
    if state.graded_at is not None:
        return state.graded_at + timing.retention_s
    if state.conversation_seen_at is not None:
        return state.conversation_seen_at + timing.session_wait_s
    if state.session_seen_at is not None:
        return state.session_seen_at + timing.orphan_ttl_s
    return None


def is_marker(state: JoinState) -> bool:
    """A graded trial with nothing pending: only remembered, to drop its repeats (on disk,
    services.runtime.graded), never ticked."""
    return state.graded_at is not None and state.conversation is None and state.session is None


def awaiting(state: JoinState) -> Literal["conversation", "session"] | None:
    """Which input a pending join waits for (None: neither, or it is graded)."""
    if state.graded_at is not None:
        return None
    if state.conversation is None:
        return "conversation" if state.session is not None else None
    return "session" if state.session is None else None


# ------------------------------------------------------------- why a record is refused
def conversation_conflict(conv: ConversationFinished, state: JoinState | None) -> Rejection:
    return Rejection(
        "session_conflict",
        (
            f"trial {conv.trial_id!r} (run {conv.run_id!r}) claims session {conv.session_id!r}, "
            f"already joined to trial {joined_trial(state)!r}; the first is graded, this one is "
            "not"
        ),
    )


def session_conflict(sess: SessionPersisted, owner: str | None) -> Rejection:
    return Rejection(
        "session_conflict",
        (
            f"the persisted session {sess.session_id!r} names trial {sess.trial_id!r} "
            f"(run {sess.run_id!r}), but the session is joined to trial {owner!r}; it is not "
            "used for that trial"
        ),
    )


def session_too_large(size: int, limit: int) -> Rejection:
    return Rejection(
        "session_too_large",
        (f"{size} bytes exceeds the session limit of {limit} (PASSK_MAX_SESSION_BYTES)"),
    )
