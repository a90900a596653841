"""The codec: every kind of bad input is refused with its own reason, and nothing is raised."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from schemas.events import ALL_MODELS, ConversationFinished, Label, SessionPersisted
from services.contract.codec import Rejection, decode, encode
from tests.unit.schemas.samples import DROP, SAMPLES, sample


def as_bytes(data: Any) -> bytes:
    return json.dumps(data).encode("utf-8")


CF = ConversationFinished
VERSION = "unknown_schema_version"

BAD_INPUT: list[tuple[str, bytes | None, type[BaseModel], str, str]] = [
    # (case, raw bytes, model, reason, something the detail must say)
    ("tombstone", None, CF, "empty", "no value"),
    ("zero bytes", b"", CF, "empty", "0 bytes"),
    ("latin-1 bytes", "caf\xe9".encode("latin-1"), CF, "invalid_utf8", "utf-8"),
    ("truncated utf-8", b'{"a": "\xe2\x82"}', CF, "invalid_utf8", "utf-8"),
    ("not json", b"{event_id: 1}", CF, "invalid_json", "line 1"),
    ("truncated json", as_bytes(SAMPLES[CF])[:-5], CF, "invalid_json", "char"),
    ("whitespace only", b"   \n", CF, "invalid_json", "Expecting value"),
    ("a list", b"[1, 2]", CF, "not_an_object", "list"),
    ("a string", b'"conversation_finished"', CF, "not_an_object", "str"),
    ("null", b"null", CF, "not_an_object", "NoneType"),
    ("a number", b"42", CF, "not_an_object", "int"),
    ("version 2", as_bytes(sample(CF, schema_version=2)), CF, VERSION, "2"),
    ("version null", as_bytes(sample(CF, schema_version=None)), CF, VERSION, "None"),
    ("version '1'", as_bytes(sample(CF, schema_version="1")), CF, VERSION, "'1'"),
    ("version true", as_bytes(sample(CF, schema_version=True)), CF, VERSION, "True"),
    ("no trial_id", as_bytes(sample(CF, trial_id=DROP)), CF, "missing_field", "trial_id"),
    ("no event_id", as_bytes(sample(CF, event_id=DROP)), CF, "missing_field", "event_id"),
    (
        "no transcript, no session_id",
        as_bytes(sample(CF, transcript=DROP, session_id=DROP)),
        CF,
        "missing_field",
        "session_id",
    ),
    ("empty object", b"{}", SessionPersisted, "missing_field", "session_id"),
    ("trial_id a number", as_bytes(sample(CF, trial_id=7)), CF, "invalid_field", "trial_id"),
    ("empty run_id", as_bytes(sample(CF, run_id="")), CF, "invalid_field", "run_id"),
    ("bad role", as_bytes(sample(CF, transcript=[{"role": "x"}])), CF, "invalid_field", "role"),
    (
        "state a list",
        as_bytes(sample(SessionPersisted, state=[])),
        SessionPersisted,
        "invalid_field",
        "state",
    ),
    (
        "naive time",
        as_bytes(sample(CF, occurred_at="2026-11-30T12:00:00")),
        CF,
        "invalid_field",
        "occurred_at",
    ),
    ("passed 'maybe'", as_bytes(sample(Label, passed="maybe")), Label, "invalid_field", "passed"),
    (
        "missing and mistyped together",
        as_bytes(sample(CF, trial_id=DROP, run_id=5)),
        CF,
        "invalid_field",
        "run_id",
    ),
    (
        "a session on the conversation topic",
        as_bytes(SAMPLES[SessionPersisted]),
        CF,
        "wrong_type",
        "type",
    ),
    (
        "a label on the session topic",
        as_bytes(SAMPLES[Label]),
        SessionPersisted,
        "wrong_type",
        "session_persisted",
    ),
    (
        "another type without an event_id",
        as_bytes(sample(SessionPersisted, event_id=DROP)),
        CF,
        "wrong_type",
        "conversation_finished",
    ),
    ("oversized", as_bytes(sample(CF, padding="x" * 2_000_000)), CF, "oversized", "limit"),
]


@pytest.mark.parametrize(
    ("raw", "model", "reason", "says"),
    [case[1:] for case in BAD_INPUT],
    ids=[case[0] for case in BAD_INPUT],
)
def test_bad_input_is_refused_with_its_reason(
    raw: bytes | None, model: type[BaseModel], reason: str, says: str
) -> None:
    result = decode(raw, model)
    assert isinstance(result, Rejection), result
    assert result.reason == reason, result
    assert says.lower() in result.detail.lower(), result.detail


def test_the_size_limit_is_the_callers() -> None:
    raw = encode(ConversationFinished.model_validate(SAMPLES[ConversationFinished]))
    assert isinstance(decode(raw, ConversationFinished, max_bytes=len(raw)), ConversationFinished)
    refused = decode(raw, ConversationFinished, max_bytes=len(raw) - 1)
    assert isinstance(refused, Rejection) and refused.reason == "oversized"
    assert str(len(raw)) in refused.detail


def test_a_long_list_of_errors_is_summarised() -> None:
    result = decode(b'{"schema_version": 1}', ConversationFinished)
    assert isinstance(result, Rejection) and result.reason == "missing_field"
    assert "and 2 more" in result.detail  # 7 missing fields, 5 spelled out


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_encode_then_decode_gives_the_same_event(model: type[BaseModel]) -> None:
    event = model.model_validate(SAMPLES[model])
    raw = encode(event)
    assert isinstance(raw, bytes)
    assert decode(raw, model) == event


def test_a_missing_schema_version_means_version_one() -> None:
    decoded = decode(as_bytes(sample(ConversationFinished, schema_version=DROP)), CF)
    assert isinstance(decoded, ConversationFinished)
    assert decoded.schema_version == 1


def test_unknown_fields_survive_decode_and_encode() -> None:
    decoded = decode(as_bytes(sample(SessionPersisted, tenant="acme")), SessionPersisted)
    assert isinstance(decoded, SessionPersisted)
    assert json.loads(encode(decoded))["tenant"] == "acme"


def test_encode_writes_utf8_json_with_z_times() -> None:
    event = SessionPersisted.model_validate(sample(SessionPersisted, state={"note": "réparé ✓"}))
    raw = encode(event)
    text = raw.decode("utf-8")
    assert json.loads(text)["state"] == {"note": "réparé ✓"}
    assert json.loads(text)["occurred_at"].endswith("Z")


def nested(depth: int, inner: str = "1") -> bytes:
    """A conversation whose `padding` field nests `depth` objects deep."""
    body = '{"a":' * depth + inner + "}" * depth
    head = json.dumps(sample(CF))[:-1]
    return f'{head}, "padding": {body}}}'.encode()


@pytest.mark.parametrize("depth", [65, 900, 10_000, 200_000])
def test_json_nested_past_the_limit_is_refused_without_recursion_error(depth: int) -> None:
    result = decode(nested(depth), CF, max_bytes=10_000_000)
    assert isinstance(result, Rejection), result
    assert result.reason == "too_deep"
    assert "64" in result.detail and "PASSK_MAX_JSON_DEPTH" in result.detail


def test_nesting_up_to_the_limit_is_accepted_and_the_limit_is_the_callers() -> None:
    # the event object is level 1, `padding` adds 62 objects and the list in them one more
    ok = nested(62, "[1]")
    assert isinstance(decode(ok, CF), ConversationFinished)
    refused = decode(ok, CF, max_depth=10)
    assert isinstance(refused, Rejection) and refused.reason == "too_deep"
    assert isinstance(decode(nested(63, "[1]"), CF), Rejection)


def test_nesting_depth_counts_lists_and_objects() -> None:
    from services.contract.codec import nesting_depth

    assert nesting_depth(1, 64) == 0
    assert nesting_depth({}, 64) == 1
    assert nesting_depth({"a": [1, {"b": []}], "c": {}}, 64) == 4


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_what_the_fast_parser_reads_validates_as_the_standard_parser_reads_it(
    model: type[BaseModel],
) -> None:
    raw = as_bytes(sample(model))
    assert decode(raw, model) == model.model_validate(json.loads(raw))


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    # 200 brackets in all, one level of nesting past the event's own: accepted
    raw = as_bytes(sample(CF, run_id="[{" * 100))
    decoded = decode(raw, CF)
    assert isinstance(decoded, ConversationFinished) and decoded.run_id == "[{" * 100


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"x": 1, "x": 2}', 2),
        (b'{"x": 123456789012345678901234567890}', 123456789012345678901234567890),
        (b'{"x": "\\ud83d\\ude00"}', "\U0001f600"),
    ],
)
def test_the_fast_parser_reads_json_edge_cases_as_the_standard_one(
    raw: bytes, expected: Any
) -> None:
    from services.contract.codec import _parsed

    got = _parsed(raw)
    assert isinstance(got, dict)
    want = json.loads(raw)
    assert got["x"] == want["x"] or (got["x"] != got["x"] and want["x"] != want["x"])  # NaN
    assert want["x"] == expected or expected != expected


def test_a_lone_surrogate_is_read_by_the_standard_parser_and_refused_by_name() -> None:
    from services.contract.codec import _UNPARSED, _parsed

    raw = as_bytes(sample(CF, run_id="\ud800"))
    assert _parsed(raw) is _UNPARSED
    refused = decode(raw, CF)
    assert isinstance(refused, Rejection) and refused.reason == "invalid_field"
    assert "run_id" in refused.detail


# Issue 21, item 4: numbers that are not numbers, as the red team sent them.
def _with_metrics(field: str, literal: str) -> bytes:
    raw = as_bytes(sample(CF))
    return raw[:-1] + f', "metrics": {{"{field}": {literal}}}}}'.encode()


@pytest.mark.parametrize(
    ("field", "literal", "reason", "says"),
    [
        ("duration_ms", "Infinity", "non_finite_number", "Infinity"),
        ("duration_ms", "-Infinity", "non_finite_number", "-Infinity"),
        ("latency_ms", "NaN", "non_finite_number", "NaN"),
        ("duration_ms", "1e400", "non_finite_number", "metrics.duration_ms"),
        ("a_field_of_its_own", "1E+400", "non_finite_number", "metrics.a_field_of_its_own"),
        ("input_tokens", "1e30", "invalid_field", "metrics.input_tokens"),
        ("output_tokens", "100000001", "invalid_field", "less than or equal to 100000000"),
        ("turns", "-1", "invalid_field", "greater than or equal to 0"),
        ("turns", "10001", "invalid_field", "less than or equal to 10000"),
        ("duration_ms", str(7 * 24 * 3600 * 1000 + 1), "invalid_field", "metrics.duration_ms"),
        ("latency_ms", "3600001", "invalid_field", "metrics.latency_ms"),
    ],
)
def test_non_finite_and_absurd_metrics_are_refused_with_a_reason(
    field: str, literal: str, reason: str, says: str
) -> None:
    refused = decode(_with_metrics(field, literal), CF)
    assert isinstance(refused, Rejection), refused
    assert refused.reason == reason and says in refused.detail, refused


@pytest.mark.parametrize(
    ("field", "literal"),
    [
        ("duration_ms", "604800000"),
        ("latency_ms", "3600000"),
        ("input_tokens", "100000000"),
        ("turns", "10000"),
        ("duration_ms", "1.5e3"),
        ("x", "1e300"),
    ],
)
def test_metrics_at_their_bounds_are_accepted(field: str, literal: str) -> None:
    decoded = decode(_with_metrics(field, literal), CF)
    assert isinstance(decoded, ConversationFinished), decoded


def test_a_string_that_looks_like_a_huge_number_is_only_text() -> None:
    raw = as_bytes(sample(CF, run_id="1e400" + "9" * 300))
    decoded = decode(raw, CF)
    assert isinstance(decoded, ConversationFinished) and decoded.run_id.startswith("1e400")


def test_decode_or_reject_holds_to_the_settings_bounds() -> None:
    from services.contract.codec import decode_or_reject
    from services.contract.settings import Settings

    raw = json.dumps(sample(ConversationFinished)).encode()
    assert isinstance(decode_or_reject(raw, ConversationFinished, Settings()), ConversationFinished)
    small = Settings(PASSK_MAX_EVENT_BYTES=len(raw) - 1)  # type: ignore[call-arg]
    refused = decode_or_reject(raw, ConversationFinished, small)
    assert isinstance(refused, Rejection) and refused.reason == "oversized"
    shallow = Settings(PASSK_MAX_JSON_DEPTH=2)  # type: ignore[call-arg]
    refused = decode_or_reject(raw, ConversationFinished, shallow)
    assert isinstance(refused, Rejection) and refused.reason == "too_deep"
