"""Numbers that are not numbers, through the real broker (issue 21, item 4), as the red team
sent them: `duration_ms: Infinity` and `1e400` passed validation, and `input_tokens: 1e30`
landed in the token histogram's sum. Now `passk replay` skips such a line with its reason,
and every processor reading ConversationFinished dead-letters it; the stream goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.support import (
    isolated_env,
    passk,
    produce,
    publish_scenarios,
    read_topic,
    reasons_by_key,
    workers,
)
from tests.unit.factories import conversation, scenario, session

pytestmark = pytest.mark.integration

# (trial, the metrics as raw JSON text, the reason its dead letter must give)
HOSTILE = [
    ("inf", '{"duration_ms": Infinity}', "non_finite_number"),
    ("nan", '{"latency_ms": NaN}', "non_finite_number"),
    ("e400", '{"duration_ms": 1e400}', "non_finite_number"),
    ("tok30", '{"input_tokens": 1e30}', "invalid_field"),  # refused before too
    ("tok31", '{"input_tokens": 1000000000000000000000000000000}', "invalid_field"),
    ("neg", '{"turns": -3}', "invalid_field"),  # refused before too
    ("slow", '{"latency_ms": 90000000}', "invalid_field"),
]


def with_metrics(trial: str, metrics: str) -> bytes:
    raw = encode(conversation(trial)).decode()
    body = json.loads(raw)
    body.pop("metrics", None)
    text = json.dumps(body)
    return f'{text[:-1]}, "metrics": {metrics}}}'.encode()


def test_replay_skips_non_finite_and_absurd_numbers_with_their_reason(
    settings: Settings, tmp_path: Path
) -> None:
    lines = [with_metrics(trial, metrics).decode() for trial, metrics, _ in HOSTILE]
    lines.append(encode(conversation("fine")).decode())
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(lines) + "\n")
    done = passk(settings, "replay", str(path), timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    for lineno, (_, _, reason) in enumerate(HOSTILE, start=1):
        assert f"line {lineno}: {reason}" in done.stderr, done.stderr
    assert f"{len(HOSTILE)} invalid line(s) skipped" in done.stderr
    sent = read_topic(settings, Topic.CONVERSATION_FINISHED, min_count=1)
    assert [v["trial_id"] for _, v, _ in sent] == ["fine"]


def test_every_reader_of_conversations_dead_letters_them_and_goes_on(
    settings: Settings, tmp_path: Path
) -> None:
    publish_scenarios(settings, [scenario()])
    log = tmp_path / "workers.log"
    processors = ["gate", "judge", "sink"]
    with workers(settings, processors, isolated_env(settings), log):
        produce(
            settings,
            Topic.CONVERSATION_FINISHED,
            [(f"s-{t}", with_metrics(t, m)) for t, m, _ in HOSTILE],
        )
        produce(settings, Topic.CONVERSATION_FINISHED, [("s-good", encode(conversation("good")))])
        produce(settings, Topic.SESSION_PERSISTED, [("s-good", encode(session("good")))])
        wanted = len(HOSTILE) * len(processors)
        dead = read_topic(settings, Topic.DEAD_LETTERS, min_count=wanted, timeout=90)
        gates = read_topic(settings, Topic.GATE_RESULTS, min_count=2, timeout=90)
    letters = reasons_by_key(dead)
    for trial, _, reason in HOSTILE:
        assert letters[f"s-{trial}"] == {p: reason for p in processors}, letters
    # the stream went on: the good trial after them was graded
    assert {v["trial_id"] for _, v, _ in gates} == {"good"}, gates
