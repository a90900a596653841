"""DeadLetters.decoded, the one way every processor reads an input: the record as its model,
or None once it is a dead letter, sent whole to the dead-letter topic with the codec's
reason, within the bounds its settings give (PASSK_MAX_EVENT_BYTES, PASSK_MAX_JSON_DEPTH).
The real DeadLetters of a real app (no broker): only its delivery is captured."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from schemas.events import ConversationFinished, DeadLetter
from services.contract.codec import encode
from services.runtime.app import DeadLetters, make_app
from tests.unit.factories import conversation, gate_result
from tests.unit.fakes import default_settings
from tests.unit.join_fakes import record

SOURCE = "dl.conversation-finished.v1"
TRIAL = conversation("t1")
RAW = encode(TRIAL)


class Sent(list[tuple[str, bytes | None, bytes]]):
    """What the dead letters delivered: (topic name, key, value)."""

    async def __call__(self, topic: Any, key: bytes | None, value: bytes) -> None:
        self.append((topic.get_topic_name(), key, value))


def dead_letters(tmp_path: Path, **settings: Any) -> tuple[DeadLetters, Sent]:
    given = default_settings(
        PASSK_TOPIC_PREFIX="dl.", PASSK_DATA_DIR=str(tmp_path), PASSK_METRICS_PORT=0, **settings
    )
    letters = DeadLetters(make_app("gate", given), "gate", given)
    letters.deliver = sent = Sent()  # type: ignore[assignment]
    return letters, sent


def decoded(letters: DeadLetters, value: bytes | None) -> ConversationFinished | None:
    event = record(SOURCE, value, key=b"s-t1", partition=3, offset=42)
    return asyncio.run(letters.decoded(event, ConversationFinished))


def counted(reason: str) -> float:
    return (
        REGISTRY.get_sample_value("passk_dead_letters_total", {"topic": SOURCE, "reason": reason})
        or 0.0
    )


@pytest.mark.parametrize(
    "bounds", [{}, {"PASSK_MAX_EVENT_BYTES": len(RAW)}], ids=["defaults", "exactly-its-size"]
)
def test_a_good_record_is_its_model_and_nothing_is_sent(
    tmp_path: Path, bounds: dict[str, Any]
) -> None:
    letters, sent = dead_letters(tmp_path, **bounds)
    found = decoded(letters, RAW)
    assert isinstance(found, ConversationFinished)
    assert (found.trial_id, found.session_id, found.exit_reason) == ("t1", "s-t1", "product_closed")
    assert [m.content for m in found.transcript][-1] == "Recorded. Goodbye."
    assert sent == []


WRONG_VERSION = json.dumps({**json.loads(RAW), "schema_version": 99}).encode()


@pytest.mark.parametrize(
    ("bounds", "value", "reason"),
    [
        # the conversation itself, refused only by a bound the settings set lower
        ({"PASSK_MAX_EVENT_BYTES": len(RAW) - 1}, RAW, "oversized"),
        ({"PASSK_MAX_JSON_DEPTH": 2}, RAW, "too_deep"),  # transcript: a list of objects
        ({}, b'{"trial_id": "t1", ', "invalid_json"),
        ({}, b"\xff\xfe", "invalid_utf8"),
        ({}, encode(gate_result("state")), "wrong_type"),  # another event on this topic
        ({}, WRONG_VERSION, "unknown_schema_version"),
        ({}, b"[1, 2]", "not_an_object"),
        ({}, None, "empty"),  # a tombstone
    ],
    ids=[
        "too-large",
        "too-deep",
        "not-json",
        "not-utf8",
        "wrong-event",
        "wrong-schema-version",
        "not-an-object",
        "tombstone",
    ],
)
def test_a_bad_record_is_none_and_sent_whole_to_the_dead_letters_with_its_reason(
    tmp_path: Path, bounds: dict[str, Any], value: bytes | None, reason: str
) -> None:
    letters, sent = dead_letters(tmp_path, **bounds)
    before = counted(reason)
    assert decoded(letters, value) is None
    ((topic, key, letter),) = sent
    assert (topic, key) == ("dl.dead-letters.v1", b"s-t1")  # keyed by the original key
    dead = DeadLetter.model_validate_json(letter)
    assert (dead.reason, dead.processor) == (reason, "gate")
    assert (dead.source_topic, dead.partition, dead.offset) == (SOURCE, 3, 42)
    assert base64.b64decode(dead.key_b64 or "") == b"s-t1"
    assert base64.b64decode(dead.value_b64) == (value or b"")
    assert dead.detail  # the codec says what is wrong, not only which kind
    assert counted(reason) == before + 1
