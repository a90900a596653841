"""Dead letters keep the original bytes whole, say where they came from and why."""

from __future__ import annotations

import base64
import json

from schemas.events import DeadLetter
from services.contract.codec import Rejection, decode, encode
from services.contract.deadletter import MAX_KEPT_BYTES, dead_letter

BAD = b'{"event_id": "x", \xff broken'


def letter(**changes: object) -> DeadLetter:
    args: dict[str, object] = {
        "processor": "gate",
        "source_topic": "passk.conversation-finished.v1",
        "partition": 3,
        "offset": 42,
        "key": b"s-1",
        "value": BAD,
        "rejection": Rejection("invalid_utf8", "byte 0xff in position 19"),
    }
    args.update(changes)
    return dead_letter(**args)  # type: ignore[arg-type]


def test_the_original_key_and_value_are_kept_byte_for_byte() -> None:
    record = letter()
    assert base64.b64decode(record.value_b64) == BAD
    assert record.key_b64 is not None and base64.b64decode(record.key_b64) == b"s-1"


def test_it_says_where_it_came_from_and_why() -> None:
    record = letter()
    assert (record.source_topic, record.partition, record.offset) == (
        "passk.conversation-finished.v1",
        3,
        42,
    )
    assert record.processor == "gate"
    assert record.reason == "invalid_utf8"
    assert record.detail == "byte 0xff in position 19"
    assert record.type == "dead_letter"


def test_the_same_message_redelivered_is_the_same_dead_letter() -> None:
    assert letter().event_id == letter().event_id
    assert letter().event_id != letter(offset=43).event_id
    assert letter().event_id != letter(processor="judge").event_id


def test_without_an_offset_the_content_tells_letters_apart() -> None:
    one = letter(offset=None, partition=None)
    other = letter(offset=None, partition=None, value=b"other bytes")
    assert one.event_id != other.event_id
    assert one.event_id == letter(offset=None, partition=None).event_id


def test_a_missing_key_or_value_is_recorded_as_such() -> None:
    record = letter(key=None, value=None, rejection=Rejection("empty", "tombstone"))
    assert record.key_b64 is None
    assert record.value_b64 == ""
    assert record.reason == "empty"


def test_a_long_detail_is_truncated() -> None:
    record = letter(rejection=Rejection("invalid_json", "d" * 10_000))
    assert record.detail == "d" * 2000
    assert base64.b64decode(record.value_b64) == BAD


def test_a_message_up_to_the_kept_size_is_kept_whole() -> None:
    value = b"x" * MAX_KEPT_BYTES
    assert base64.b64decode(letter(value=value).value_b64) == value


def test_a_larger_message_is_kept_in_part_saying_where_the_whole_is() -> None:
    value = b"y" * (MAX_KEPT_BYTES + 10)
    record = letter(value=value, rejection=Rejection("oversized", "too big"))
    assert base64.b64decode(record.value_b64) == value[:MAX_KEPT_BYTES]
    assert f"{len(value)} bytes" in record.detail
    assert "passk.conversation-finished.v1[3]@42" in record.detail
    assert record.detail.endswith("too big")
    # Encoded, it still fits the 4 MiB message limit of passk's broker.
    assert len(encode(record)) < 4_000_000


def test_a_dead_letter_round_trips_through_the_codec() -> None:
    record = letter()
    raw = encode(record)
    assert json.loads(raw)["reason"] == "invalid_utf8"
    assert decode(raw, DeadLetter, max_bytes=len(raw)) == record


def test_what_the_codec_refuses_becomes_a_dead_letter_with_that_reason() -> None:
    rejection = decode(b"[1]", DeadLetter)
    assert isinstance(rejection, Rejection)
    record = letter(value=b"[1]", rejection=rejection)
    assert record.reason == "not_an_object"
    assert "list" in record.detail
