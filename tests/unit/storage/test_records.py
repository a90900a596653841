from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import AwareDatetime, BaseModel

from schemas.events import Label
from services.calibration.store import CalibrationRow
from services.storage.records import (
    Counted,
    GateRecord,
    JudgeRecord,
    SummaryDeltas,
    TranscriptRecord,
    TrialAttemptRecord,
    TrialRecord,
    WindowRecord,
    as_utc,
    copied_fields,
    problem_with,
    record_for,
    row_of,
    summarize,
    trial_record,
)
from tests.unit.storage import factories as f


@pytest.mark.parametrize(
    ("event", "kind", "key"),
    [
        (f.verdict("t1", "failed"), TrialRecord, ("t1",)),
        (f.gate("t1", "state", False), GateRecord, ("t1", "state")),
        (f.judge("t1", "polite", "passed"), JudgeRecord, ("t1", "polite")),
        (f.conversation("t1"), TranscriptRecord, ("t1",)),
    ],
)
def test_each_event_makes_one_row_under_its_natural_key(event, kind, key) -> None:
    record = record_for(event)
    assert type(record) is kind
    names = [n for n, fi in kind.model_fields.items() if getattr(fi, "primary_key", False) is True]
    assert tuple(getattr(record, n) for n in names) == key
    assert record.event_id == event.event_id


def test_a_verdict_row_keeps_what_the_report_and_debugging_need() -> None:
    row = trial_record(f.verdict("t1", "failed", failed=[("judge:polite", "rude")], when=5))
    assert row.failed_checks == [{"check": "judge:polite", "reason": "rude"}]
    assert (row.k, row.outcome, row.agent_version, row.exit_reason) == (
        3,
        "failed",
        "agent-7",
        "product_closed",
    )
    assert row.metrics is not None and row.metrics["turns"] == 6
    assert row.verdict_at == f.at(5) and row.finished_at == f.at(0)


def test_the_transcript_pairs_each_tool_call_with_its_answer() -> None:
    row = record_for(f.conversation("t1"))
    assert isinstance(row, TranscriptRecord)
    assert row.tool_calls == [
        {
            "message_index": 1,
            "id": "call-1",
            "name": "save_report",
            "arguments": '{"fault": "pump"}',
            "result": '{"ok": true}',
        }
    ]
    assert row.messages[2] == {"role": "tool", "content": '{"ok": true}', "tool_call_id": "call-1"}


def test_unknown_fields_of_an_input_event_are_kept() -> None:
    event = f.conversation("t1")
    event = type(event).model_validate({**event.model_dump(mode="json"), "harness": "ci-7"})
    row = record_for(event)
    assert isinstance(row, TranscriptRecord) and row.extra == {"harness": "ci-7"}


def test_events_the_sink_does_not_store_are_refused() -> None:
    with pytest.raises(TypeError):
        record_for(Label(event_id="l", trial_id="t", judge_id="j", passed=True))  # type: ignore[arg-type]


def test_a_verdict_without_a_usable_k_is_a_problem() -> None:
    assert problem_with(f.verdict("t1", "passed", k=0)) is not None
    assert problem_with(f.verdict("t1", "passed", k=1)) is None


def test_times_are_stored_in_utc() -> None:
    plus2 = timezone(timedelta(hours=2))
    assert as_utc(datetime(2026, 1, 1, 14, tzinfo=plus2)) == datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert as_utc(datetime(2026, 1, 1, 14)) == datetime(2026, 1, 1, 14, tzinfo=UTC)
    assert as_utc(datetime(2026, 1, 1, 14, tzinfo=plus2)).tzinfo is UTC
    assert as_utc(None) is None


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        (["passed", "passed"], (2, 2, 0, 0, None, None, False)),
        (["passed"] * 3, (3, 3, 0, 0, 1.0, 1.0, True)),
        (["passed"] * 4 + ["failed"], (5, 4, 1, 0, 1.0, 0.4, False)),
        (["passed", "error", "passed"], (3, 2, 0, 1, 1.0, 0.0, False)),
        # an invalid trial (the simulated user spoiled it) is out of n: three passes of
        # three judged pass, the fourth trial whatever it was
        (["passed", "invalid", "passed", "passed"], (3, 3, 0, 0, 1.0, 1.0, True)),
    ],
)
def test_summary_of_one_scenario(outcomes: list[str], expected: tuple) -> None:
    rows = [trial_record(f.verdict(f"t{i}", o, when=i)) for i, o in enumerate(outcomes)]
    rows.append(trial_record(f.verdict("other", "failed", scenario_id="elsewhere")))
    s = summarize("run-1", "billing", rows)
    assert (
        s.n,
        s.passed,
        s.failed,
        s.errors,
        s.pass_at_k,
        s.pass_hat_k,
        s.scenario_passed,
    ) == pytest.approx(expected)


def test_the_latest_verdict_sets_k() -> None:
    rows = [
        trial_record(f.verdict("t1", "passed", k=5, when=1)),
        trial_record(f.verdict("t2", "passed", k=2, version="v2", when=9)),
    ]
    s = summarize("run-1", "billing", rows)
    assert (s.k, s.scenario_passed, s.last_verdict_at) == (2, True, f.at(9))


def test_a_summary_needs_trials() -> None:
    with pytest.raises(ValueError):
        summarize("run-1", "billing", [])


# ------------------------------------------------------------ incremental summary deltas


def _row(trial_id: str, outcome: str, when: float, scenario_id: str = "billing"):
    return trial_record(f.verdict(trial_id, outcome, scenario_id=scenario_id, when=when))


def test_a_new_trial_adds_one_count_and_a_duplicate_adds_none() -> None:
    deltas = SummaryDeltas()
    assert deltas.apply(_row("t1", "passed", 1))
    assert deltas.apply(_row("t1", "passed", 1))  # redelivered: same version, replaces itself
    assert deltas.counts == {
        ("run-1", "billing"): {"passed": 1, "failed": 0, "error": 0, "invalid": 0}
    }


def test_a_regrade_moves_one_count_and_a_stale_copy_moves_none() -> None:
    stored = Counted(("run-1", "billing"), "failed", _row("t1", "failed", 1).verdict_at)
    deltas = SummaryDeltas(known={"t1": stored})
    assert deltas.apply(_row("t1", "passed", 2))
    assert not deltas.apply(_row("t1", "error", 1.5))  # older than what replaced it
    assert deltas.counts == {
        ("run-1", "billing"): {"passed": 1, "failed": -1, "error": 0, "invalid": 0}
    }


def test_a_regrade_into_another_scenario_moves_the_count_across() -> None:
    deltas = SummaryDeltas()
    deltas.apply(_row("t1", "passed", 1, scenario_id="typo"))
    deltas.apply(_row("t1", "passed", 2, scenario_id="billing"))
    assert deltas.counts[("run-1", "typo")]["passed"] == 0
    assert deltas.counts[("run-1", "billing")]["passed"] == 1
    assert deltas.homes() == [("run-1", "billing"), ("run-1", "typo")]


def test_a_row_is_the_trials_only_with_its_run_scenario_and_session() -> None:
    from services.storage.records import gate_record, judge_record, of_trial, trial_record
    from services.storage.records import transcript_record as tr

    trial = trial_record(f.verdict("t", "passed"))
    assert of_trial(trial, tr(f.conversation("t")))
    assert of_trial(trial, gate_record(f.gate("t", "exit", True)))
    assert of_trial(trial, judge_record(f.judge("t", "polite", "passed")))
    other_run = tr(f.conversation("t", run_id="run-2"))
    other_scenario = gate_record(f.gate("t", "exit", True, scenario_id="followup"))
    other_session = tr(f.conversation("t").model_copy(update={"session_id": "s-retry"}))
    assert not any(of_trial(trial, r) for r in (other_run, other_scenario, other_session))
    assert not of_trial(trial, judge_record(f.judge("t", "polite", "passed", run_id="run-2")))


# ------------------------------------------------- each row a declared subset of its event

PROJECTIONS = [
    TrialRecord,
    TrialAttemptRecord,
    GateRecord,
    JudgeRecord,
    TranscriptRecord,
    WindowRecord,
    CalibrationRow,
]


def stored_as(annotation: Any) -> tuple[str, bool]:
    """What a column of this annotation holds (a scalar type's name, or `list`/`dict` for a
    JSON column: a nested model is stored as its dict) and whether it may be None."""
    nullable = False
    if get_origin(annotation) in (Union, UnionType):
        args = get_args(annotation)
        nullable = type(None) in args
        (annotation,) = [a for a in args if a is not type(None)]
    if get_origin(annotation) is Literal:
        (kind,) = {type(value) for value in get_args(annotation)}
        return kind.__name__, nullable
    if get_origin(annotation) in (list, dict):
        return get_origin(annotation).__name__, nullable
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "dict", nullable
    if annotation is AwareDatetime:
        return "datetime", nullable
    return annotation.__name__, nullable


@pytest.mark.parametrize("row", PROJECTIONS, ids=lambda row: row.__name__)
def test_every_copied_column_is_a_field_of_its_event_with_a_compatible_type(row) -> None:
    event = row.projects.model_fields
    assert set(row.computed) <= set(row.model_fields), "a computed column the row lacks"
    assert copied_fields(row), "a projection copies something of its event"
    for name in copied_fields(row):
        assert name in event, f"{row.__name__}.{name} is no field of {row.projects.__name__}"
        kind, event_nullable = stored_as(event[name].annotation)
        column_kind, column_nullable = stored_as(row.model_fields[name].annotation)
        assert column_kind == kind, f"{row.__name__}.{name}: {column_kind} holds no {kind}"
        assert column_nullable or not event_nullable, f"{row.__name__}.{name} holds no None"


def test_a_row_is_made_only_of_its_event_and_exactly_its_computed_columns() -> None:
    verdict = f.verdict("t1", "passed")
    with pytest.raises(TypeError):
        row_of(GateRecord, verdict, occurred_at=verdict.occurred_at)
    with pytest.raises(TypeError):  # verdict_at forgotten
        row_of(TrialRecord, verdict, finished_at=None)
    row = row_of(TrialAttemptRecord, verdict, verdict_at=as_utc(verdict.occurred_at))
    assert (row.trial_id, row.attempt, row.outcome) == ("t1", verdict.attempt, "passed")


def test_an_invalid_trial_is_counted_apart() -> None:
    rows = [
        trial_record(f.verdict(f"t{i}", o, when=i))
        for i, o in enumerate(["passed", "invalid", "invalid", "failed"])
    ]
    s = summarize("run-1", "billing", rows)
    assert (s.n, s.passed, s.failed, s.errors, s.invalid) == (2, 1, 1, 0, 2)
    deltas = SummaryDeltas()
    for row in rows:
        deltas.apply(row)
    assert deltas.counts[("run-1", "billing")] == {
        "passed": 1,
        "failed": 1,
        "error": 0,
        "invalid": 2,
    }
