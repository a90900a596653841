"""What the sink keeps: the live sink and `passk rebuild` both decide with `storable`."""

from __future__ import annotations

import json

import pytest

from schemas.events import TrialVerdict
from services.contract.topics import Topic
from services.sink.domain import MODELS, storable
from tests.unit.fakes import default_settings
from tests.unit.storage.factories import verdict

SETTINGS = default_settings(PASSK_MAX_EVENT_BYTES=4096)


def test_every_projected_topic_has_its_model() -> None:
    assert set(MODELS) == {
        Topic.TRIAL_VERDICTS,
        Topic.GATE_RESULTS,
        Topic.JUDGE_VERDICTS,
        Topic.CONVERSATION_FINISHED,
        Topic.SCENARIO_RELIABILITY,
    }


def test_a_valid_verdict_is_kept_as_its_event() -> None:
    kept = storable(verdict("t1", "passed").model_dump_json().encode(), TrialVerdict, SETTINGS)
    assert isinstance(kept, TrialVerdict) and kept.trial_id == "t1"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"{not json", "invalid_json"),
        (b"x" * 5000, "oversized"),
    ],
)
def test_an_unreadable_record_is_refused_with_the_codecs_reason(value: bytes, reason: str) -> None:
    refused = storable(value, TrialVerdict, SETTINGS)
    assert getattr(refused, "reason", None) == reason


def test_a_field_the_projection_cannot_hold_is_an_invalid_field() -> None:
    raw = json.loads(verdict("t1", "passed").model_dump_json())
    raw["k"] = 0  # a scenario's k is at least 1
    refused = storable(json.dumps(raw).encode(), TrialVerdict, SETTINGS)
    assert getattr(refused, "reason", None) == "invalid_field"
