"""Events on passk's topics.

Input events (written by harnesses and products) keep unknown fields, so a producer
that is one minor version ahead is not dead-lettered. Derived events are written by
passk itself; their `event_id` is deterministic so that a redelivered or replayed
trial yields the same id and consumers can drop the duplicate.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
)

SCHEMA_VERSION: Literal[1] = 1

Outcome = Literal["passed", "failed", "error"]
# A trial's outcome: a judge's outcome, or `invalid` (a check of the simulated user failed:
# the trial says nothing about the agent, neither passed nor failed, counted apart).
TrialOutcome = Literal["passed", "failed", "error", "invalid"]
# A judge's result: an outcome, or `skipped` (skip_when_gates_fail: the trial's gates had
# already failed it, so the model was not asked). A skipped judge neither passes, fails
# nor errors a trial.
# `not_sampled`: a production trial outside its scenario's LLM-judge sample (DESIGN.md,
# "Production traffic"); like `skipped`, it never passes, fails nor errors a trial.
JudgeResult = Literal["passed", "failed", "error", "skipped", "not_sampled"]
GateName = Literal["exit", "state"]
# Whose exit the exit gate checked: the one the product persisted, else the harness's.
ExitSource = Literal["session", "harness"]
# `product`: both gates (the product owns completion); `conversation`: no state gate.
Completion = Literal["product", "conversation"]


def utcnow() -> datetime:
    return datetime.now(UTC)


class _Event(BaseModel):
    event_id: str = Field(min_length=1, description="Unique per event; the idempotency key.")
    type: str
    schema_version: Literal[1] = SCHEMA_VERSION
    occurred_at: AwareDatetime = Field(default_factory=utcnow, description="RFC 3339, UTC.")

    # Every time on the wire is RFC 3339 in UTC, whatever zone the producer wrote.
    @field_serializer(
        "occurred_at", "finished_at", "window_start", "window_end", check_fields=False
    )
    def _rfc3339(self, value: datetime | None) -> str | None:
        if value is None:
            return None
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


class InputEvent(_Event):
    model_config = ConfigDict(extra="allow")


class DerivedEvent(_Event):
    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------- input events


class Message(BaseModel):
    """One message of a transcript, in OpenAI chat format."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None


# A turn is one user or assistant message; system and tool messages are plumbing.
TURN_ROLES = frozenset({"user", "assistant"})


def count_turns(transcript: Sequence[Message]) -> int:
    """Turns as DESIGN.md counts them, when the producer reported none."""
    return sum(1 for m in transcript if m.role in TURN_ROLES)


MAX_TOKENS = 100_000_000  # per trial, input or output
MAX_TURNS = 10_000
MAX_DURATION_MS = 7 * 24 * 3600 * 1000  # a week
MAX_LATENCY_MS = 3600 * 1000  # an hour for one reply


class TrialMetrics(BaseModel):
    """Performance figures: tracked, never gating (except the declared limits)."""

    model_config = ConfigDict(extra="allow")

    # Bounds far above any real conversation: a figure past them is a producer's bug, and
    # one 1e30 in a histogram's sum poisons every rate on the dashboard. Non-finite values
    # (Infinity, NaN, 1e400) are refused here and, anywhere in an event, by the decoder.
    input_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    output_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    turns: int | None = Field(None, ge=0, le=MAX_TURNS)
    duration_ms: float | None = Field(None, ge=0, le=MAX_DURATION_MS, allow_inf_nan=False)
    latency_ms: float | None = Field(None, ge=0, le=MAX_LATENCY_MS, allow_inf_nan=False)

    @field_validator(
        "input_tokens", "output_tokens", "turns", "duration_ms", "latency_ms", mode="before"
    )
    @classmethod
    def _not_a_boolean(cls, value: object) -> object:
        # JSON `true` is not a count; pydantic's lax mode would read it as 1.
        if isinstance(value, bool):
            raise ValueError("a boolean is not a number")
        return value


EXTERNAL_CHECK_ID = r"^[A-Za-z0-9_.-]{1,128}$"
# One conversation reports at most this many external checks (docs/external-checks.md).
MAX_EXTERNAL_CHECKS = 256


class ExternalCheck(BaseModel):
    """A check result the harness or an existing evaluator already computed. It gates only
    when the scenario names it in `external_checks`; shown as `external:<id>`."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(pattern=EXTERNAL_CHECK_ID)
    # A JSON boolean only: "yes", 1 or "false" from an evaluator is a bug to see, not a result.
    passed: bool = Field(strict=True)
    reason: str = ""


class ConversationFinished(InputEvent):
    type: Literal["conversation_finished"] = "conversation_finished"
    run_id: str = Field(min_length=1)
    scenario_id: str = Field(min_length=1)
    # The content hash of the scenario version the trial was run against (`passk run` sets
    # it): the gate and the judge grade against that version, never a later one; a version
    # never published makes the trial a dead letter (unknown_scenario_version). Absent:
    # graded against the latest published version (traffic from other producers).
    scenario_version: str | None = Field(None, min_length=1)
    trial_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    agent_version: str | None = None
    exit_reason: str = Field(min_length=1)
    transcript: list[Message]
    metrics: TrialMetrics | None = None
    checks: list[ExternalCheck] = Field(
        default_factory=list,
        max_length=MAX_EXTERNAL_CHECKS,
        description="Results an existing evaluator computed; gating only when the scenario "
        "lists the id in external_checks. Ids are unique within one event.",
    )
    production: bool = Field(
        False,
        description="A production trial: taken from a trace with no passk ids by a scenario's "
        "`match` rule. Its LLM judges run only when it is in the scenario's sample.",
    )

    @field_validator("checks")
    @classmethod
    def _one_result_per_check(cls, checks: list[ExternalCheck]) -> list[ExternalCheck]:
        # Two results under one id leave no honest way to pick one: refused, not guessed.
        ids = [c.id for c in checks]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"external check ids must be unique; repeated: {', '.join(dupes)}")
        return checks


class SessionPersisted(InputEvent):
    type: Literal["session_persisted"] = "session_persisted"
    session_id: str = Field(min_length=1)
    state: dict[str, Any]
    exit_reason: str | None = Field(
        None,
        min_length=1,
        description="The exit the product recorded; when present, the exit gate checks it "
        "instead of the harness's ConversationFinished.exit_reason.",
    )
    trial_id: str | None = None
    run_id: str | None = None
    scenario_id: str | None = None


class Label(InputEvent):
    """A human's judgement of one judge on one trial, for calibration."""

    type: Literal["label"] = "label"
    trial_id: str = Field(min_length=1)
    judge_id: str = Field(min_length=1)
    passed: bool
    labeller: str | None = None
    note: str | None = None


# -------------------------------------------------------------- derived events


class CheckOutcome(BaseModel):
    """One elementary check inside a gate: a limit or an outcome expectation."""

    check: str
    passed: bool
    reason: str
    expected: Any = None
    found: Any = None


class ExternalCheckResult(BaseModel):
    """An external check as the gate read it against the scenario: `gating` when the
    scenario names the id in `external_checks`, else recorded and shown, never gating."""

    check: str = Field(description='"external:<id>"')
    passed: bool
    reason: str
    gating: bool
    reported: bool = Field(
        True, description="False: the scenario names it but the conversation did not report it"
    )


class TrialIdentity(BaseModel):
    """Which trial a result is of: the five fields every per-trial derived event carries,
    flat on the wire (TrialRef, RegradeRequest). Passed about as one value; `as_fields()`
    spreads it into an event, whose JSON stays as it was."""

    model_config = ConfigDict(frozen=True)

    trial_id: str
    run_id: str
    scenario_id: str
    scenario_version: str
    session_id: str

    @classmethod
    def of(cls, trial: Any, scenario_version: str | None = None) -> TrialIdentity:
        """The identity of anything that names its trial (an event, a projection row; a
        conversation, with the `scenario_version` it is graded against)."""
        version = trial.scenario_version if scenario_version is None else scenario_version
        return cls(
            trial_id=trial.trial_id,
            run_id=trial.run_id,
            scenario_id=trial.scenario_id,
            scenario_version=version,
            session_id=trial.session_id,
        )

    def as_fields(self) -> dict[str, str]:
        return self.model_dump()


class TrialRef(DerivedEvent):
    """What every per-trial derived event carries, so consumers need no join."""

    trial_id: str
    run_id: str
    scenario_id: str
    scenario_version: str
    session_id: str

    @property
    def identity(self) -> TrialIdentity:
        return TrialIdentity.of(self)


class GateResult(TrialRef):
    type: Literal["gate_result"] = "gate_result"
    gate: GateName
    passed: bool
    reasons: list[str] = Field(default_factory=list, description="Why it failed; empty on pass.")
    checks: list[CheckOutcome] = Field(default_factory=list)
    # Facts of the trial, carried so the verdict needs no join with the input topics.
    agent_version: str | None = None
    exit_reason: str | None = Field(None, description="The exit the exit gate checked.")
    exit_source: ExitSource | None = Field(
        None, description="Whose exit that was: the persisted session's or the harness's."
    )
    completion: Completion = Field(
        "product", description="`conversation`: the scenario has no state gate to wait for."
    )
    metrics: TrialMetrics | None = None
    finished_at: AwareDatetime | None = Field(None, description="occurred_at of the conversation")
    attempt: int = Field(1, ge=1, description="The grading attempt this result belongs to.")
    external_checks: list[ExternalCheckResult] = Field(
        default_factory=list,
        description="The conversation's external checks (on the exit gate's result only); "
        "they never change this gate's `passed`: the verdict counts the gating ones.",
    )
    sampled: bool = Field(
        True,
        description="False for a production trial outside its scenario's LLM-judge sample: "
        "the verdict then waits for no LLM judge (they are `not_sampled`).",
    )


class JudgeCall(BaseModel):
    """The trace of a judge's model call (LLM judges; empty for the others): the model that
    answered, the tokens the API's usage reported (summed over every attempt), the wall
    time of the whole call (retries and backoff included), how many requests it took, and
    whether the cache answered instead. Carried by the verdict, kept by the projection and
    shown by the trial view alike."""

    model: str | None = None
    prompt_hash: str | None = None
    latency_ms: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    attempts: int = 0
    cached: bool = False


class JudgeVerdict(TrialRef, JudgeCall):
    type: Literal["judge_verdict"] = "judge_verdict"
    judge_id: str
    judge_kind: str
    judge_spec: dict[str, Any] = Field(default_factory=dict)
    gating: bool = True
    result: JudgeResult
    reason: str
    judge_version: str | None = Field(
        None, description="hash of (judge id, assertion, prompt template hash, model)"
    )
    attempt: int = Field(1, ge=1, description="The grading attempt this verdict belongs to.")

    @property
    def passed(self) -> bool:
        return self.result == "passed"


class FailedCheck(BaseModel):
    check: str
    reason: str


class AdvisoryJudge(BaseModel):
    """A judge whose verdict was recorded but could not fail the trial, and why."""

    judge_id: str
    judge_version: str | None = None
    why: str
    result: Outcome
    reason: str


class TrialVerdict(TrialRef):
    type: Literal["trial_verdict"] = "trial_verdict"
    k: int
    outcome: TrialOutcome
    failed_checks: list[FailedCheck] = Field(default_factory=list)
    checks_passed: list[str] = Field(default_factory=list)
    # Which judges could fail this trial when it was graded, so an old result stays
    # explainable after a calibration changes the policy.
    gating_judges: list[str] = Field(default_factory=list)
    advisory_judges: list[AdvisoryJudge] = Field(default_factory=list)
    # External checks the scenario does not name: recorded and shown, never counted.
    advisory_checks: list[ExternalCheckResult] = Field(default_factory=list)
    # LLM judges not asked because the gates had already failed the trial (skip_when_gates_fail).
    skipped_judges: list[str] = Field(default_factory=list)
    agent_version: str | None = None
    exit_reason: str | None = None
    exit_source: ExitSource | None = None
    completion: Completion = "product"
    metrics: TrialMetrics | None = None
    finished_at: AwareDatetime | None = Field(None, description="occurred_at of the conversation")
    attempt: int = Field(
        1,
        ge=1,
        description="Grading attempt: a re-grade of the trial emits attempt + 1, and the "
        "verdict with the highest attempt supersedes the others everywhere.",
    )
    # A production trial outside its scenario's LLM-judge sample: its LLM judges were not
    # run (listed here); gates and deterministic judges were. Always true off production.
    sampled: bool = True
    not_sampled_judges: list[str] = Field(default_factory=list)


def with_attempt(event_id: str, attempt: int) -> str:
    """A derived event's id for a grading attempt: attempt 1 keeps the id it always had,
    a re-grade's outputs get new ids, so consumers do not drop them as repeats."""
    return event_id if attempt == 1 else f"{event_id}:attempt-{attempt}"


class RegradeRequest(DerivedEvent):
    """`passk regrade` asks the gate and the judge to grade one trial again, as `attempt`
    (one more than its newest verdict's), from its input events as the log holds them.
    The outputs carry the attempt and new event ids, and the verdict assembles attempt
    N from attempt N's results only; the verdict with the highest attempt supersedes."""

    type: Literal["regrade_request"] = "regrade_request"
    trial_id: str = Field(min_length=1)
    run_id: str = Field(min_length=1)
    scenario_id: str = Field(min_length=1)
    scenario_version: str = Field(min_length=1, description="graded against this version again")
    session_id: str = Field(min_length=1)
    attempt: int = Field(ge=2)
    reason: str = ""
    conversation: ConversationFinished
    session: SessionPersisted | None = Field(
        None, description="the trial's newest persisted session in the log; none if it never came"
    )
    sample_rate: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="`passk regrade --sample R`: the LLM-judge rate this attempt is graded "
        "at (a backfill of the trials the scenario's sample left out); None: the scenario's",
    )


class JudgeRequest(DerivedEvent):
    """The gate asks the judge to grade a trial of a scenario with skip_when_gates_fail, once
    both gates are decided: the judge calls the model only when they passed, and records its
    LLM judges as `skipped` when they failed (the trial is failed either way)."""

    type: Literal["judge_request"] = "judge_request"
    trial_id: str = Field(min_length=1)
    scenario_id: str = Field(min_length=1)
    scenario_version: str = Field(min_length=1, description="the version the gates graded")
    gates_passed: bool
    failed_gates: list[str] = Field(default_factory=list)
    conversation: ConversationFinished


class ConfusionCounts(BaseModel):
    """A judge's confusion matrix over a labelled set (positive = the judge flags a
    failure), its model errors apart, and the precision and recall that follow (None
    without a flagged, or a failing, item). Carried by a calibration and kept by the
    calibration store alike."""

    tp: int = Field(ge=0)
    fp: int = Field(ge=0)
    fn: int = Field(ge=0)
    tn: int = Field(ge=0)
    errors: int = Field(0, ge=0)
    n: int = Field(ge=0)
    precision: float | None = None
    recall: float | None = None


class JudgeCalibration(DerivedEvent, ConfusionCounts):
    """One judge version's confusion matrix over a labelled set; positive = the judge
    flags a failure. Written by `passk calibrate` (source "set") and the calibration
    processor (source "labels": the set plus production labels)."""

    type: Literal["judge_calibration"] = "judge_calibration"
    judge_id: str = Field(min_length=1)
    judge_version: str = Field(min_length=1)
    assertion: str | None = None
    prompt_hash: str | None = None
    model: str | None = None
    dimension: str | None = None
    source: Literal["set", "labels"] = "set"
    bar: float
    min_labelled: int
    gating: bool
    reason: str


class LabelledVerdict(DerivedEvent):
    """A human label joined with the judge verdict it labels (internal, keyed by judge id)."""

    type: Literal["labelled_verdict"] = "labelled_verdict"
    trial_id: str
    run_id: str | None = None
    scenario_id: str | None = None
    judge_id: str
    judge_version: str | None
    judge_result: Outcome
    judge_reason: str
    label: Literal["pass", "fail"]
    note: str | None = None
    label_event_id: str


class ReliabilityFigures(BaseModel):
    """A scenario's counts of trials and its estimators over them (None while there are
    fewer than k trials): what a reliability record, the run report and a window's view
    each show."""

    k: int
    n: int
    passed: int
    failed: int
    errors: int
    pass_at_k: float | None
    pass_hat_k: float | None
    # Trials spoiled by the simulated user (a user check failed): out of n, counted apart.
    invalid: int = 0


class ScenarioReliability(DerivedEvent, ReliabilityFigures):
    """One scenario's figures in one run (scope `run`) or one event-time window (scope
    `window`). The last record for a (scenario, run) or (scenario, window, window_start)
    is the current figure."""

    type: Literal["scenario_reliability"] = "scenario_reliability"
    scenario_id: str
    scenario_version: str | None = None
    pass_hat_k_lower: float = Field(
        description="5% quantile of p**k under the Beta(c+1, n-c+1) posterior on p"
    )
    pass_hat_k_upper: float = Field(
        description="95% quantile of p**k under the Beta(c+1, n-c+1) posterior on p"
    )
    scenario_passed: bool
    run_id: str | None = Field(None, description="Set for a run record, null for a window")
    window: str | None = Field(None, description='Window size label, e.g. "1h"; null for a run')
    window_start: AwareDatetime | None = None
    window_end: AwareDatetime | None = None
    # A window record's alert targets as the aggregate knew them (the scenario's `alert:`,
    # else the defaults), so a picture can mark the windows where the drop alert's
    # condition held without the scenario catalog.
    alert_min_pass_hat_k: float | None = None
    alert_min_trials: int | None = None
    # Production traffic under sampling (DESIGN.md, "Production traffic"): the trials whose
    # every check ran (LLM judges included) and pass^k over them, beside the figures over
    # all trials above (gates and deterministic checks). Equal to n / passed without sampling.
    n_sampled: int | None = None
    passed_sampled: int | None = None
    errors_sampled: int | None = None
    pass_hat_k_sampled: float | None = None
    pass_hat_k_sampled_lower: float | None = None
    pass_hat_k_sampled_upper: float | None = None


class DeadLetter(DerivedEvent):
    """An input passk could not use, kept whole (base64) with where it came from and why."""

    type: Literal["dead_letter"] = "dead_letter"
    source_topic: str
    partition: int | None = None
    offset: int | None = None
    key_b64: str | None = None
    value_b64: str
    reason: str = Field(description="A short, low-cardinality cause, e.g. invalid_json.")
    detail: str = ""
    processor: str


INPUT_EVENTS: dict[str, type[InputEvent]] = {
    "conversation_finished": ConversationFinished,
    "session_persisted": SessionPersisted,
    "label": Label,
}
ALL_MODELS: tuple[type[BaseModel], ...] = (
    ConversationFinished,
    SessionPersisted,
    Label,
    GateResult,
    JudgeVerdict,
    TrialVerdict,
    JudgeCalibration,
    LabelledVerdict,
    ScenarioReliability,
    DeadLetter,
    RegradeRequest,
    JudgeRequest,
)
