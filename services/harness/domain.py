"""The harness's pure core: trial ids, event ids, when a conversation ends, and the two
input events a finished trial becomes. No I/O here; `runner` does the talking.

A trial's ids are fixed by (run id, scenario id, trial number), and so are its events'
ids, so the same run id run again names the same trials, and `runner` skips every one the
log already holds: nothing is published twice.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.events import (
    MAX_EXTERNAL_CHECKS,
    ConversationFinished,
    ExternalCheck,
    Message,
    SessionPersisted,
    TrialMetrics,
    count_turns,
)
from schemas.scenario import Scenario

# The harness's own exits; every other exit is the product's own signal.
PERSONA_EXHAUSTED = "persona_exhausted"
MAX_TURNS = "max_turns"
TIMEOUT = "timeout"
AGENT_ERROR = "agent_error"
HARNESS_EXITS = (PERSONA_EXHAUSTED, MAX_TURNS, TIMEOUT, AGENT_ERROR)


def trial_id(run_id: str, scenario_id: str, number: int) -> str:
    return f"{run_id}:{scenario_id}:{number:03d}"


def trial_number(trial: str) -> int:
    """The NNN of `<run_id>:<scenario_id>:<NNN>` (run ids may hold colons themselves)."""
    return int(trial.rsplit(":", 1)[1])


def conversation_event_id(trial: str) -> str:
    return f"run:{trial}:conversation"


def session_event_id(trial: str) -> str:
    return f"run:{trial}:session"


@dataclass(frozen=True)
class PlannedTrial:
    scenario: Scenario
    number: int
    trial_id: str


def plan_trials(scenarios: list[Scenario], run_id: str, trials: int) -> list[PlannedTrial]:
    """max(trials, k) trials per scenario, numbered from 1, scenarios interleaved so a
    stopped run has some of every scenario rather than all of the first."""
    per = {s.id: max(trials, s.k) for s in scenarios}
    plan: list[PlannedTrial] = []
    for number in range(1, max(per.values(), default=0) + 1):
        for s in scenarios:
            if number <= per[s.id]:
                plan.append(PlannedTrial(s, number, trial_id(run_id, s.id, number)))
    return plan


# ------------------------------------------------------------------ agent replies


class AgentError(Exception):
    """The agent did not answer by the protocol: the trial ends `agent_error` (or
    `timeout`) with this reason on the event."""

    def __init__(self, reason: str, exit_reason: str = AGENT_ERROR) -> None:
        super().__init__(reason)
        self.reason = reason
        self.exit_reason = exit_reason


class Usage(BaseModel):
    """Token counts, under either name the OpenAI API has used."""

    model_config = ConfigDict(extra="allow")

    input_tokens: int | None = Field(None, ge=0)
    output_tokens: int | None = Field(None, ge=0)
    prompt_tokens: int | None = Field(None, ge=0)
    completion_tokens: int | None = Field(None, ge=0)

    @property
    def tokens_in(self) -> int | None:
        return self.input_tokens if self.input_tokens is not None else self.prompt_tokens

    @property
    def tokens_out(self) -> int | None:
        return self.output_tokens if self.output_tokens is not None else self.completion_tokens


class AgentReply(BaseModel):
    """One reply of the HTTP (and python) protocol:
    `{"reply": str, "exit_reason": str|null, "session_id"?, "usage"?, "checks"?}`."""

    model_config = ConfigDict(extra="allow")

    reply: str | None = None
    exit_reason: str | None = Field(None, min_length=1)
    session_id: str | None = Field(None, min_length=1, max_length=512)
    usage: Usage | None = None
    checks: list[ExternalCheck] = Field(default_factory=list)
    # Set by the openai_chat adapter: what the model called (recorded, never graded).
    tool_calls: list[dict[str, Any]] | None = None


def parse_reply(payload: Any) -> AgentReply:
    """A reply that is not the protocol's JSON object is an agent error, with why."""
    if not isinstance(payload, dict):
        raise AgentError(f"the reply is not a JSON object (got {type(payload).__name__})")
    if "reply" not in payload and "exit_reason" not in payload:
        raise AgentError("the reply has neither `reply` nor `exit_reason`")
    try:
        return AgentReply.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(reply)"
        raise AgentError(
            f"the reply does not follow the protocol: {where}: {first['msg']}"
        ) from None


def fold_checks(
    held: list[ExternalCheck], new: list[ExternalCheck], limit: int = MAX_EXTERNAL_CHECKS
) -> list[ExternalCheck]:
    """The conversation's external checks after a reply's: one result per id (the event
    refuses repeats), passed only while every report of it passed (AND across turns: a
    later pass does not undo an earlier failure; the first failure's reason is kept).
    Beyond `limit` distinct ids the new ones are left out (a named one then fails as not
    reported), so the event stays within its bound (docs/external-checks.md)."""
    out = list(held)
    at = {c.id: i for i, c in enumerate(out)}
    for check in new:
        i = at.get(check.id)
        if i is None:
            if len(out) < limit:
                at[check.id] = len(out)
                out.append(check)
        elif out[i].passed and not check.passed:
            out[i] = check
    return out


# ------------------------------------------------------------------ the conversation


@dataclass
class Conversation:
    """What one trial has said so far and how long it took; `runner` fills it in."""

    transcript: list[Message] = field(default_factory=list)
    session_id: str | None = None
    latencies_ms: list[float] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    checks: list[ExternalCheck] = field(default_factory=list)
    user_turns: int = 0

    def said_by_user(self, text: str) -> None:
        self.transcript.append(Message(role="user", content=text))
        self.user_turns += 1

    def replied(self, reply: AgentReply, latency_ms: float) -> None:
        self.latencies_ms.append(latency_ms)
        message = Message(role="assistant", content=reply.reply)
        if reply.tool_calls:
            message.tool_calls = reply.tool_calls
        self.transcript.append(message)
        if reply.tool_calls and not reply.exit_reason:
            # The harness runs none of the product's tools; chat APIs refuse a history
            # whose tool calls have no results, so each gets one saying so.
            for call in reply.tool_calls:
                self.transcript.append(
                    Message(
                        role="tool",
                        tool_call_id=str(call.get("id", "")),
                        content="(not run: passk run records tool calls, it does not execute them)",
                    )
                )
        if reply.session_id:
            self.session_id = reply.session_id
        if reply.usage is not None:
            if reply.usage.tokens_in is not None:
                self.input_tokens = (self.input_tokens or 0) + reply.usage.tokens_in
            if reply.usage.tokens_out is not None:
                self.output_tokens = (self.output_tokens or 0) + reply.usage.tokens_out
        self.checks = fold_checks(self.checks, reply.checks)

    @property
    def turns(self) -> int:
        return count_turns(self.transcript)


Step = Literal["continue"] | str


def after_reply(scenario: Scenario, conversation: Conversation, reply: AgentReply) -> Step:
    """What happens after the agent answered: the product closed it (its exit), the
    scenario's turn limit is reached (`max_turns`), or the user speaks again."""
    if reply.exit_reason:
        return reply.exit_reason
    limit = scenario.limits.max_turns
    # The user's next line would be one turn past the limit: stop here.
    if limit is not None and conversation.turns + 1 > limit:
        return MAX_TURNS
    return "continue"


def user_gives_up(scenario: Scenario, conversation: Conversation) -> bool:
    """The simulated user's own turn budget (user.max_turns): then it is exhausted."""
    budget = scenario.user.max_turns if scenario.user else 20
    return conversation.user_turns >= budget


# ------------------------------------------------------------------ the events


@dataclass(frozen=True)
class Probed:
    """What the state probe found: the persisted session, and the product's recorded exit."""

    state: dict[str, Any]
    exit_reason: str | None


@dataclass(frozen=True)
class FinishedTrial:
    planned: PlannedTrial
    run_id: str
    agent_version: str | None
    exit_reason: str
    conversation: Conversation
    duration_ms: float
    finished_at: datetime
    harness_error: str | None = None
    user_simulator: dict[str, Any] | None = None


def session_id_of(finished: FinishedTrial) -> str:
    """The product's session id; a harness one (the trial id) when the agent named none,
    say because its first reply already failed."""
    return finished.conversation.session_id or finished.planned.trial_id


def metrics_of(finished: FinishedTrial) -> TrialMetrics:
    c = finished.conversation
    extra: dict[str, Any] = {}
    latency = None
    if c.latencies_ms:
        latency = round(sum(c.latencies_ms) / len(c.latencies_ms), 3)
        extra = {
            "latency_ms_max": round(max(c.latencies_ms), 3),
            "agent_replies": len(c.latencies_ms),
        }
    return TrialMetrics(
        turns=c.turns,
        duration_ms=round(finished.duration_ms, 3),
        latency_ms=latency,  # the mean agent reply
        input_tokens=c.input_tokens,
        output_tokens=c.output_tokens,
        **extra,
    )


def conversation_event(
    finished: FinishedTrial, *, state_probe: str | None = None
) -> ConversationFinished:
    """`state_probe`: why no persisted session was found, kept with the trial."""
    extra: dict[str, Any] = {}
    if state_probe is not None:
        extra["state_probe"] = state_probe
    if finished.harness_error is not None:
        # Why the harness ended the trial (agent_error, timeout): an extra field, which
        # the contract allows on input events, so the reason is kept with the trial.
        extra["harness_error"] = finished.harness_error
    if finished.user_simulator is not None:
        extra["user_simulator"] = finished.user_simulator
    return ConversationFinished(
        event_id=conversation_event_id(finished.planned.trial_id),
        occurred_at=finished.finished_at,
        run_id=finished.run_id,
        scenario_id=finished.planned.scenario.id,
        scenario_version=finished.planned.scenario.version,
        trial_id=finished.planned.trial_id,
        session_id=session_id_of(finished),
        agent_version=finished.agent_version,
        exit_reason=finished.exit_reason,
        transcript=finished.conversation.transcript,
        metrics=metrics_of(finished),
        checks=finished.conversation.checks,
        **extra,
    )


def session_event(finished: FinishedTrial, probed: Probed) -> SessionPersisted:
    return SessionPersisted(
        event_id=session_event_id(finished.planned.trial_id),
        occurred_at=finished.finished_at,
        session_id=session_id_of(finished),
        state=probed.state,
        exit_reason=probed.exit_reason or None,
        trial_id=finished.planned.trial_id,
        run_id=finished.run_id,
        scenario_id=finished.planned.scenario.id,
    )


# ------------------------------------------------------------------ the summary


@dataclass
class RunSummary:
    planned: int = 0
    skipped: int = 0  # already in the log from an earlier run with this id
    run: int = 0
    published: int = 0  # trials whose every event was acknowledged
    not_published: int = 0  # every trial not published, for whatever reason
    # of those, the trials the broker did not take (not delivered, or not acknowledged
    # within the producer's deadline), in the order they were planned
    undelivered: list[str] = field(default_factory=list)
    interrupted: int = 0  # in flight or not started when stopped: nothing of them sent
    sessions_found: int = 0
    exits: Counter[str] = field(default_factory=Counter)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (trial id, reason)

    def exit_code(self) -> int:
        """130 stopped; 4 a trial the broker did not take; 1 a trial not published for
        another reason (its simulated user failed); else 0."""
        if self.interrupted:
            return 130
        if self.undelivered:
            return 4
        if self.not_published:
            return 1
        return 0
