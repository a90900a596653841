"""The event contract: JSON round-trips, RFC 3339 times, forward compatibility, refusals."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from schemas.events import (
    ALL_MODELS,
    INPUT_EVENTS,
    ConversationFinished,
    DeadLetter,
    GateResult,
    InputEvent,
    JudgeVerdict,
    Label,
    SessionPersisted,
    TrialVerdict,
)
from tests.unit.schemas.samples import DROP, SAMPLES, sample

RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
MODELS = pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
INPUT_MODELS = pytest.mark.parametrize(
    "model", list(INPUT_EVENTS.values()), ids=lambda m: m.__name__
)


def required_fields(model: type[BaseModel]) -> list[str]:
    return [name for name, field in model.model_fields.items() if field.is_required()]


def test_every_model_has_a_sample() -> None:
    assert set(SAMPLES) == set(ALL_MODELS)


@MODELS
def test_json_round_trip_gives_an_equal_model(model: type[BaseModel]) -> None:
    event = model.model_validate(SAMPLES[model])
    again = model.model_validate_json(event.model_dump_json())
    assert again == event
    # And nothing of the producer's JSON is lost on the way through.
    assert json.loads(again.model_dump_json()) == json.loads(event.model_dump_json())


@MODELS
def test_occurred_at_is_written_in_rfc3339_utc_with_z(model: type[BaseModel]) -> None:
    paris = timezone(timedelta(hours=2))
    event = model.model_validate(
        {**SAMPLES[model], "occurred_at": datetime(2026, 6, 1, 14, 30, tzinfo=paris)}
    )
    written = json.loads(event.model_dump_json())["occurred_at"]
    assert RFC3339_UTC.match(written), written
    assert written == "2026-06-01T12:30:00Z"
    assert model.model_validate_json(event.model_dump_json()) == event


@MODELS
def test_occurred_at_defaults_to_now_in_utc(model: type[BaseModel]) -> None:
    before = datetime.now(UTC)
    event = model.model_validate(sample(model, occurred_at=DROP))
    assert before <= event.occurred_at <= datetime.now(UTC)  # type: ignore[attr-defined]
    assert RFC3339_UTC.match(json.loads(event.model_dump_json())["occurred_at"])


@MODELS
def test_a_time_without_a_zone_is_refused(model: type[BaseModel]) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(sample(model, occurred_at="2026-11-30T12:00:00"))
    assert info.value.errors()[0]["loc"] == ("occurred_at",)


def test_input_events_are_registered_by_their_type() -> None:
    assert INPUT_EVENTS == {
        "conversation_finished": ConversationFinished,
        "session_persisted": SessionPersisted,
        "label": Label,
    }
    for type_, model in INPUT_EVENTS.items():
        assert model.model_validate(sample(model, type=DROP)).type == type_


@INPUT_MODELS
def test_input_events_keep_unknown_fields_and_write_them_back(
    model: type[InputEvent],
) -> None:
    # A producer one minor version ahead must not be dead-lettered, nor lose its fields.
    raw = sample(model, producer_build="2026.11.3", experiment={"arm": "b", "seed": 7})
    event = model.model_validate_json(json.dumps(raw))
    assert event.model_extra == {
        "producer_build": "2026.11.3",
        "experiment": {"arm": "b", "seed": 7},
    }
    written = json.loads(event.model_dump_json())
    assert written["producer_build"] == "2026.11.3"
    assert written["experiment"] == {"arm": "b", "seed": 7}
    assert model.model_validate_json(event.model_dump_json()) == event


def test_transcript_messages_keep_unknown_fields() -> None:
    raw = sample(ConversationFinished)
    raw["transcript"] = [{"role": "assistant", "content": None, "refusal": "I can't"}]
    raw["metrics"] = {"turns": 1, "cache_read_tokens": 12}
    written = json.loads(ConversationFinished.model_validate(raw).model_dump_json())
    assert written["transcript"][0]["refusal"] == "I can't"
    assert written["metrics"]["cache_read_tokens"] == 12


@pytest.mark.parametrize(
    "model", [m for m in ALL_MODELS if m not in INPUT_EVENTS.values()], ids=lambda m: m.__name__
)
def test_derived_events_drop_unknown_fields(model: type[BaseModel]) -> None:
    event = model.model_validate(sample(model, surprise="x"))
    assert "surprise" not in json.loads(event.model_dump_json())


# The contract's required fields, spelled out (DESIGN.md, "Input events"), so that a
# field silently becoming optional in the model is caught here.
CONTRACT_REQUIRED = {
    ConversationFinished: {
        "event_id",
        "run_id",
        "scenario_id",
        "trial_id",
        "session_id",
        "exit_reason",
        "transcript",
    },
    SessionPersisted: {"event_id", "session_id", "state"},
    Label: {"event_id", "trial_id", "judge_id", "passed"},
}


@pytest.mark.parametrize("model", list(CONTRACT_REQUIRED), ids=lambda m: m.__name__)
def test_input_events_require_what_the_contract_requires(model: type[BaseModel]) -> None:
    assert set(required_fields(model)) == CONTRACT_REQUIRED[model]


@pytest.mark.parametrize(
    ("model", "field"),
    [(m, f) for m in ALL_MODELS for f in required_fields(m)],
    ids=lambda x: x if isinstance(x, str) else x.__name__,
)
def test_a_missing_required_field_is_refused_naming_it(model: type[BaseModel], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(sample(model, **{field: DROP}))
    errors = info.value.errors()
    assert [(e["type"], e["loc"]) for e in errors] == [("missing", (field,))]


MISTYPED: list[tuple[type[BaseModel], str, Any, tuple[Any, ...]]] = [
    (ConversationFinished, "trial_id", 123, ("trial_id",)),
    (ConversationFinished, "trial_id", "", ("trial_id",)),
    (ConversationFinished, "transcript", "hello", ("transcript",)),
    (ConversationFinished, "transcript", [{"role": "robot"}], ("transcript", 0, "role")),
    (ConversationFinished, "transcript", [{"content": "hi"}], ("transcript", 0, "role")),
    (ConversationFinished, "metrics", {"turns": -1}, ("metrics", "turns")),
    (ConversationFinished, "metrics", {"input_tokens": "many"}, ("metrics", "input_tokens")),
    (ConversationFinished, "occurred_at", "yesterday", ("occurred_at",)),
    (ConversationFinished, "schema_version", 2, ("schema_version",)),
    (ConversationFinished, "type", "session_persisted", ("type",)),
    (SessionPersisted, "state", ["not", "an", "object"], ("state",)),
    (SessionPersisted, "state", None, ("state",)),
    (SessionPersisted, "event_id", "", ("event_id",)),
    (Label, "passed", "maybe", ("passed",)),
    (GateResult, "gate", "judge", ("gate",)),
    (JudgeVerdict, "result", "ok", ("result",)),
    (TrialVerdict, "outcome", "flaky", ("outcome",)),
    (TrialVerdict, "k", "three", ("k",)),
    (DeadLetter, "partition", "first", ("partition",)),
]


@pytest.mark.parametrize(
    ("model", "field", "value", "loc"),
    MISTYPED,
    ids=[f"{m.__name__}.{f}={v!r}"[:60] for m, f, v, _ in MISTYPED],
)
def test_a_mistyped_field_is_refused_naming_it(
    model: type[BaseModel], field: str, value: Any, loc: tuple[Any, ...]
) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(sample(model, **{field: value}))
    assert [e["loc"] for e in info.value.errors()] == [loc]


def test_judge_verdict_passed_follows_its_result() -> None:
    assert JudgeVerdict.model_validate(sample(JudgeVerdict, result="passed")).passed
    assert not JudgeVerdict.model_validate(sample(JudgeVerdict, result="failed")).passed
    assert not JudgeVerdict.model_validate(sample(JudgeVerdict, result="error")).passed


def test_other_times_are_written_in_utc_too() -> None:
    verdict = TrialVerdict.model_validate(
        sample(TrialVerdict, finished_at="2026-11-30T13:59:58+02:00")
    )
    assert json.loads(verdict.model_dump_json())["finished_at"] == "2026-11-30T11:59:58Z"


@pytest.mark.parametrize(
    "field", ["input_tokens", "output_tokens", "turns", "duration_ms", "latency_ms"]
)
def test_a_boolean_is_not_a_trial_metric(field: str) -> None:
    from schemas.events import TrialMetrics

    with pytest.raises(ValidationError, match="a boolean is not a number"):
        TrialMetrics.model_validate({field: True})
    assert getattr(TrialMetrics.model_validate({field: 1}), field) == 1
