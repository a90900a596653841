"""What rows an event produces in the SQL projection, and the per-run scenario summary.

Pure functions over the event models. The row shapes are SQLModel (pydantic) models without
a table; `services.storage.store` maps each onto a table of the same columns.

Replacement rule (documented in one place, applied by the store on every write): each row
has a natural key (a trial; a trial and gate; a trial and judge; a run and scenario) and a
version timestamp (`verdict_at` for trials, `occurred_at` for the rest). A write for a key
replaces the stored row when its timestamp is the same or newer, and is ignored when older.
So a redelivered event rewrites identical values (idempotent), a re-grade after a new
scenario version replaces the old verdict, and a stale copy arriving late changes nothing.
Equal timestamps fall back to log order, which Kafka keeps per key, so the live sink and
`passk rebuild` end with the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any, ClassVar, TypeVar, overload

from pydantic import BaseModel, field_validator
from sqlmodel import JSON, Field, SQLModel

from schemas.events import (
    ConversationFinished,
    GateResult,
    JudgeCall,
    JudgeVerdict,
    ReliabilityFigures,
    ScenarioReliability,
    TrialVerdict,
)
from services.grading.estimators import ReliabilityTally

SinkEvent = TrialVerdict | GateResult | JudgeVerdict | ConversationFinished | ScenarioReliability


@overload
def as_utc(value: datetime) -> datetime: ...
@overload
def as_utc(value: None) -> None: ...
def as_utc(value: datetime | None) -> datetime | None:
    """Every stored time is aware UTC (a naive one is taken to be UTC already)."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class Projection(SQLModel):
    """A row of the projection made from one contract event: every column is the field of
    the same name of the event it `projects` (`copied_fields`, a declared subset of that
    event's fields, its types checked by tests/unit/storage/test_records.py) except the
    `computed` ones, which the row's builder derives (times made UTC, renamed or derived
    columns). A column is declared once here; its value is never copied by hand."""

    projects: ClassVar[type[BaseModel]]
    computed: ClassVar[tuple[str, ...]] = ()


@cache
def copied_fields(row: type[Projection]) -> frozenset[str]:
    """The columns of `row` that are its source event's fields as they are."""
    return frozenset(row.model_fields) - set(row.computed)


class OfTrial(Projection):
    """The columns naming the trial a row is of (schemas.events.TrialIdentity's, flat as
    the events carry them); each row's own key and columns follow."""

    trial_id: str = Field(primary_key=True)
    run_id: str = Field(index=True)
    scenario_id: str
    scenario_version: str


class TrialRecord(OfTrial):
    projects = TrialVerdict
    computed = ("finished_at", "verdict_at")

    scenario_id: str = Field(index=True)
    session_id: str
    k: int
    outcome: str
    failed_checks: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON)
    checks_passed: list[str] = Field(default_factory=list, sa_type=JSON)
    gating_judges: list[str] = Field(default_factory=list, sa_type=JSON)
    advisory_judges: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON)
    # External checks the scenario does not name. Nullable: a projection made before the
    # column existed gets it added (Store.create_schema), its old rows NULL, read as [].
    advisory_checks: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON, nullable=True)
    agent_version: str | None = None
    exit_reason: str | None = None
    exit_source: str | None = None  # session | harness: whose exit the exit gate checked
    completion: str = "product"  # conversation: graded without a state gate
    metrics: dict[str, Any] | None = Field(None, sa_type=JSON)
    finished_at: datetime | None = None
    verdict_at: datetime
    event_id: str

    @field_validator("advisory_checks", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value


class TrialAttemptRecord(OfTrial):
    """The history: every grading attempt's verdict of a trial, kept when a re-grade
    supersedes it in `trials` (which holds the newest)."""

    projects = TrialVerdict
    computed = ("verdict_at",)

    attempt: int = Field(primary_key=True)
    outcome: str
    failed_checks: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON)
    verdict_at: datetime
    event_id: str


class GateRecord(OfTrial):
    projects = GateResult
    computed = ("occurred_at",)

    gate: str = Field(primary_key=True)
    session_id: str
    passed: bool
    reasons: list[str] = Field(default_factory=list, sa_type=JSON)
    checks: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON)
    occurred_at: datetime
    event_id: str


class JudgeRecord(OfTrial, JudgeCall):
    projects = JudgeVerdict
    computed = ("occurred_at",)

    judge_id: str = Field(primary_key=True)
    judge_kind: str
    judge_spec: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    gating: bool
    result: str
    reason: str
    occurred_at: datetime
    event_id: str


class TranscriptRecord(Projection):
    """The conversation, kept for debugging. Tool calls are kept here and never graded."""

    projects = ConversationFinished
    computed = ("messages", "tool_calls", "extra", "occurred_at")

    trial_id: str = Field(primary_key=True)
    run_id: str = Field(index=True)
    scenario_id: str
    session_id: str
    agent_version: str | None = None
    exit_reason: str
    messages: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON)
    metrics: dict[str, Any] | None = Field(None, sa_type=JSON)
    extra: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    occurred_at: datetime
    event_id: str


class ScenarioSummary(SQLModel, ReliabilityFigures):
    run_id: str = Field(primary_key=True)
    scenario_id: str = Field(primary_key=True)
    scenario_passed: bool
    last_verdict_at: datetime | None = None


class WindowRecord(Projection, ReliabilityFigures):
    """One event-time window of a scenario as the aggregate last published it (its run
    records are not kept: the summaries hold the runs). Versioned by the aggregate's
    sequence number of the window's changes, so the newest figure wins whatever the order
    in which copies arrive."""

    projects = ScenarioReliability
    # window and its bounds are optional in the event (a run record has none): only a
    # window record makes a row, and its builder passes them on once it checked them.
    computed = ("window", "window_start", "window_end", "seq", "occurred_at")

    scenario_id: str = Field(primary_key=True)
    window: str = Field(primary_key=True)
    window_start: datetime = Field(primary_key=True)
    window_end: datetime
    scenario_version: str | None = None
    pass_hat_k_lower: float
    pass_hat_k_upper: float
    alert_min_pass_hat_k: float | None = None
    alert_min_trials: int | None = None
    seq: int
    occurred_at: datetime
    event_id: str
    # The sampled trials (production traffic); NULL in a row from before sampling: all.
    n_sampled: int | None = None
    passed_sampled: int | None = None
    errors_sampled: int | None = None

    def sampled_tally(self) -> ReliabilityTally:
        """The window's sampled trials (every check ran): all of them without sampling (a
        row from before sampling). What the drop alert reads, for `passk windows` and the
        review queue's `alerting` rule alike."""
        if self.n_sampled is None:
            return ReliabilityTally(
                k=self.k,
                passed=self.passed,
                failed=self.failed,
                errors=self.errors,
                invalid=self.invalid,
            )
        passed, errors = self.passed_sampled or 0, self.errors_sampled or 0
        return ReliabilityTally(
            k=self.k, passed=passed, failed=self.n_sampled - passed - errors, errors=errors
        )


Record = (
    TrialRecord | TrialAttemptRecord | GateRecord | JudgeRecord | TranscriptRecord | WindowRecord
)


R = TypeVar("R", bound=Projection)


def row_of(row: type[R], event: BaseModel, **computed: Any) -> R:
    """A row of `row` made from the event it projects: its copied columns are the event's
    fields as JSON (nested models become the dicts a JSON column holds), `computed` gives
    the rest, exactly the ones the row declares."""
    if not isinstance(event, row.projects) or set(computed) != set(row.computed):
        raise TypeError(
            f"{row.__name__} is made of a {row.projects.__name__} and its "
            f"computed columns {sorted(row.computed)}"
        )
    copied = event.model_dump(mode="json", include=set(copied_fields(row)))
    return row(**copied, **computed)


def trial_record(verdict: TrialVerdict) -> TrialRecord:
    return row_of(
        TrialRecord,
        verdict,
        finished_at=as_utc(verdict.finished_at),
        verdict_at=as_utc(verdict.occurred_at),
    )


def attempt_record(verdict: TrialVerdict) -> TrialAttemptRecord:
    return row_of(TrialAttemptRecord, verdict, verdict_at=as_utc(verdict.occurred_at))


def gate_record(result: GateResult) -> GateRecord:
    return row_of(GateRecord, result, occurred_at=as_utc(result.occurred_at))


def judge_record(verdict: JudgeVerdict) -> JudgeRecord:
    return row_of(JudgeRecord, verdict, occurred_at=as_utc(verdict.occurred_at))


def tool_calls_of(finished: ConversationFinished) -> list[dict[str, Any]]:
    """Every tool call with the tool message that answered it (if any), in transcript order."""
    answers = {m.tool_call_id: m.content for m in finished.transcript if m.role == "tool"}
    calls: list[dict[str, Any]] = []
    for index, message in enumerate(finished.transcript):
        for call in message.tool_calls or []:
            function = call.get("function") or {}
            call_id = call.get("id")
            calls.append(
                {
                    "message_index": index,
                    "id": call_id,
                    "name": function.get("name", call.get("name")),
                    "arguments": function.get("arguments", call.get("arguments")),
                    "result": answers.get(call_id) if call_id else None,
                }
            )
    return calls


def transcript_record(finished: ConversationFinished) -> TranscriptRecord:
    return row_of(
        TranscriptRecord,
        finished,
        messages=[m.model_dump(mode="json", exclude_none=True) for m in finished.transcript],
        tool_calls=tool_calls_of(finished),
        extra=dict(finished.model_extra or {}),
        occurred_at=as_utc(finished.occurred_at),
    )


def window_seq(event_id: str) -> int:
    """The aggregate numbers each window's records (`reliability:<scenario>:<scope>:<seq>`)."""
    tail = event_id.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def window_record(record: ScenarioReliability) -> WindowRecord | None:
    """The row of a window record; None for a run record."""
    if record.window is None or record.window_start is None or record.window_end is None:
        return None
    return row_of(
        WindowRecord,
        record,
        window=record.window,
        window_start=as_utc(record.window_start),
        window_end=as_utc(record.window_end),
        seq=window_seq(record.event_id),
        occurred_at=as_utc(record.occurred_at),
    )


def of_trial(trial: TrialRecord, row: GateRecord | JudgeRecord | TranscriptRecord) -> bool:
    """Whether a row kept under a trial's id is that trial's: the same run and scenario and,
    where the row has one, session. Another trial reusing the id (dead-lettered upstream as
    trial_id_conflict) may have reached the projection first; its rows are not this
    trial's and are never shown as if they were."""
    same = (row.run_id, row.scenario_id) == (trial.run_id, trial.scenario_id)
    return same and getattr(row, "session_id", trial.session_id) == trial.session_id


def problem_with(event: SinkEvent) -> str | None:
    """Why an event that decoded cleanly still cannot be stored, or None."""
    if isinstance(event, TrialVerdict) and event.k < 1:
        return f"k must be at least 1 (got {event.k})"
    return None


def record_for(event: SinkEvent) -> Record:
    """The one row an event produces (trial verdicts also refresh their run's summary)."""
    if isinstance(event, TrialVerdict):
        return trial_record(event)
    if isinstance(event, GateResult):
        return gate_record(event)
    if isinstance(event, JudgeVerdict):
        return judge_record(event)
    if isinstance(event, ConversationFinished):
        return transcript_record(event)
    if isinstance(event, ScenarioReliability):
        row = window_record(event)
        if row is not None:
            return row
    raise TypeError(f"the sink does not store {type(event).__name__}")


def records_for(event: SinkEvent) -> list[Record]:
    """Every row an event produces: a trial verdict is also one attempt of its history."""
    if isinstance(event, TrialVerdict):
        return [trial_record(event), attempt_record(event)]
    if isinstance(event, ScenarioReliability):
        row = window_record(event)
        return [row] if row is not None else []
    return [record_for(event)]


def _latest(trials: Sequence[TrialRecord]) -> TrialRecord:
    return max(trials, key=lambda t: (t.verdict_at, t.trial_id))


def summarize(run_id: str, scenario_id: str, trials: Iterable[TrialRecord]) -> ScenarioSummary:
    """One scenario's reliability in one run, recomputed from all its trial rows.

    k is the k of the latest verdict: a re-grade against a new scenario version brings
    the scenario's current k with it.
    """
    trials = [t for t in trials if t.run_id == run_id and t.scenario_id == scenario_id]
    if not trials:
        raise ValueError(f"no trials of scenario {scenario_id!r} in run {run_id!r}")
    latest = _latest(trials)
    tally = ReliabilityTally(k=latest.k)
    for trial in trials:
        tally.add(trial.outcome)
    return summary_of(run_id, scenario_id, tally, latest.verdict_at)


def summary_of(
    run_id: str, scenario_id: str, tally: ReliabilityTally, last_verdict_at: datetime | None
) -> ScenarioSummary:
    """The summary row of counted outcomes: the estimators follow from the counts alone."""
    return ScenarioSummary(
        run_id=run_id,
        scenario_id=scenario_id,
        **tally.figures(),
        last_verdict_at=as_utc(last_verdict_at),
    )


# ----------------------------------------------------------- incremental summaries

Home = tuple[str, str]  # (run_id, scenario_id): where a trial is counted


@dataclass(frozen=True)
class Counted:
    """What a summary needs to know of a stored trial row: where it counts, as what, and
    the version a newer write must match or beat to replace it."""

    home: Home
    outcome: str
    verdict_at: datetime


def counted(record: TrialRecord) -> Counted:
    return Counted((record.run_id, record.scenario_id), record.outcome, as_utc(record.verdict_at))


@dataclass
class SummaryDeltas:
    """How a batch of trial rows moves the summaries' counts: a trial's previous outcome
    leaves its summary and its new one enters, so a duplicate moves nothing and a re-grade
    moves exactly one count (and a re-grade into another run or scenario moves it across).

    Fed the stored rows of the batch's trials first (`known`), then every trial record in
    log order; a record older than the row it would replace is a stale copy the store's
    upsert ignores, and moves nothing here either.
    """

    known: dict[str, Counted] = field(default_factory=dict)  # trial_id -> current row
    counts: dict[Home, dict[str, int]] = field(default_factory=dict)  # home -> outcome -> delta

    def apply(self, record: TrialRecord) -> bool:
        """Count one trial record; False when it is stale and the store will ignore it."""
        new = counted(record)
        old = self.known.get(record.trial_id)
        if old is not None and old.verdict_at > new.verdict_at:
            return False
        if old is not None:
            self._move(old.home, old.outcome, -1)
        self._move(new.home, new.outcome, +1)
        self.known[record.trial_id] = new
        return True

    def _move(self, home: Home, outcome: str, by: int) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        row = self.counts.setdefault(home, dict.fromkeys(OUTCOMES, 0))
        row[outcome] += by

    def homes(self) -> list[Home]:
        """Every summary the batch touched, in one order for every writer (no deadlock)."""
        return sorted(self.counts)


OUTCOMES = ("passed", "failed", "error", "invalid")
