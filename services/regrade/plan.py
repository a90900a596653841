"""Which trials to re-grade and the request for each: pure functions over the projection's
rows and the input events found in the log."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from schemas.events import ConversationFinished, RegradeRequest, SessionPersisted, TrialIdentity
from services.contract.codec import encode
from services.grading.sampling import in_sample
from services.storage.records import JudgeRecord, TrialAttemptRecord, TrialRecord


@dataclass(frozen=True)
class Target:
    """A trial to grade again, as its newest verdict left it."""

    identity: TrialIdentity
    outcome: str
    attempt: int  # of its newest verdict; the re-grade is attempt + 1


def left_out(judges: Iterable[JudgeRecord], rate: float) -> set[str]:
    """`passk regrade --sample RATE`: the trials whose LLM judges the scenario's sample left
    out (a judge recorded `not_sampled`) and that are in the sample at `rate` (the
    contract's hash: at 1.0, every one of them)."""
    return {j.trial_id for j in judges if j.result == "not_sampled" and in_sample(j.trial_id, rate)}


def targets(
    trials: Iterable[TrialRecord],
    history: Iterable[TrialAttemptRecord],
    *,
    errors_only: bool,
    only: set[str] | None = None,
) -> list[Target]:
    """The run's trials to re-grade (those that ended `error`, with `errors_only`), each
    with the attempt of its newest verdict (1 for a trial graded before the history was
    kept: every verdict before re-grades existed was attempt 1)."""
    newest: dict[str, int] = {}
    for row in history:
        newest[row.trial_id] = max(newest.get(row.trial_id, 1), row.attempt)
    return [
        Target(TrialIdentity.of(t), t.outcome, newest.get(t.trial_id, 1))
        for t in sorted(trials, key=lambda t: t.trial_id)
        if (not errors_only or t.outcome == "error") and (only is None or t.trial_id in only)
    ]


@dataclass
class FoundInputs:
    """A trial's input events as the log holds them: its conversation, and the newest
    persisted session of its session id (later records replace earlier ones, as in the gate)."""

    conversations: dict[str, ConversationFinished]  # by trial_id
    sessions: dict[str, SessionPersisted]  # by session_id


def request_for(
    target: Target, found: FoundInputs, *, reason: str, sample_rate: float | None = None
) -> RegradeRequest | None:
    """The re-grade request of one trial; None when its conversation is not in the log."""
    trial = target.identity
    conversation = found.conversations.get(trial.trial_id)
    if conversation is None:
        return None
    attempt = target.attempt + 1
    return RegradeRequest(
        event_id=f"regrade:{trial.trial_id}:{attempt}",
        **trial.as_fields(),
        attempt=attempt,
        reason=reason,
        conversation=conversation,
        session=found.sessions.get(trial.session_id),
        sample_rate=sample_rate,
    )


UNKNOWN_VERSION = "unknown"  # what a verdict assembled without its gates names


@dataclass(frozen=True)
class Prepared:
    """One trial's request as it will be sent, or why it will not be."""

    target: Target
    payload: bytes | None  # the encoded RegradeRequest; None: not sent
    status: str


def prepare(
    chosen: Iterable[Target],
    found: FoundInputs,
    *,
    reason: str,
    max_bytes: int,
    sample_rate: float | None = None,
) -> list[Prepared]:
    """Every chosen trial's request, encoded, or the reason it cannot be asked for: no
    scenario version to grade against, no conversation in the log, or a request larger
    than the workers accept (they would dead-letter it as `oversized`)."""
    out = []
    for target in chosen:
        if target.identity.scenario_version == UNKNOWN_VERSION:
            out.append(Prepared(target, None, "not sent: its verdict names no scenario version"))
            continue
        request = request_for(target, found, reason=reason, sample_rate=sample_rate)
        if request is None:
            out.append(Prepared(target, None, "not sent: its conversation is not in the log"))
            continue
        payload = encode(request)
        if len(payload) > max_bytes:
            out.append(
                Prepared(
                    target,
                    None,
                    f"not sent: {len(payload)} bytes, above PASSK_MAX_EVENT_BYTES ({max_bytes})",
                )
            )
            continue
        out.append(Prepared(target, payload, "sent"))
    return out


def regraded(targets: Iterable[Target], history: Iterable[TrialAttemptRecord]) -> dict[str, str]:
    """trial_id -> outcome of each target's re-grade that the projection already holds."""
    wanted = {t.identity.trial_id: t.attempt + 1 for t in targets}
    done: dict[str, tuple[int, str]] = {}
    for row in history:
        need = wanted.get(row.trial_id)
        if need is not None and row.attempt >= need:
            if row.trial_id not in done or row.attempt > done[row.trial_id][0]:
                done[row.trial_id] = (row.attempt, row.outcome)
    return {trial: outcome for trial, (_, outcome) in done.items()}
