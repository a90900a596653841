"""Poison input through the real broker: every processor turns a record it cannot use into a
dead letter with its reason, and the stream goes on (a good trial sent after it is graded).

Before: JSON nested 10,000 deep raised RecursionError in the codec, crashed the agent, and
Faust restarted it past the record (dropped, no dead letter); a session nested 900 deep
parsed, then could not be stored in the gate's table."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from schemas.events import Message
from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.support import (
    isolated_env,
    produce,
    publish_scenarios,
    read_topic,
    reasons_by_key,
    settled,
    wait_for,
    workers,
)
from tests.unit.factories import conversation, judge_verdict, scenario, session

pytestmark = pytest.mark.integration

PROCESSORS = ["gate", "verdict", "judge", "sink"]


def deep(event: object, depth: int) -> bytes:
    """A real event with one more field nested `depth` objects deep."""
    head = encode(event)[:-1].decode()  # type: ignore[arg-type]
    body = '{"a":' * depth + "1" + "}" * depth
    return f'{head},"extra":{body}}}'.encode()


def test_every_processor_dead_letters_what_it_cannot_use_and_goes_on(
    settings: Settings, tmp_path: Path
) -> None:
    # One deterministic judge whose pattern backtracks exponentially in Python's `re`
    # (`(a+)+$` against 5,000 a's and a '!'): on RE2 it answers, and the worker goes on.
    sc = scenario(
        judges=[{"id": "no_runaway", "kind": "regex", "pattern": "(a+)+$", "must_match": False}]
    )
    publish_scenarios(settings, [sc])
    sp900 = deep(session("deep-900"), 900)
    env = isolated_env(settings, PASSK_MAX_SESSION_BYTES="70000")
    log = tmp_path / "workers.log"
    with workers(settings, PROCESSORS, env, log):
        produce(
            settings,
            Topic.CONVERSATION_FINISHED,
            [
                ("cf-deep", deep(conversation("cf-deep"), 10_000)),
            ],
        )
        produce(
            settings,
            Topic.SESSION_PERSISTED,
            [
                ("sp-deep", deep(session("sp-deep"), 10_000)),
                # parses, but nests past the limit: used to fail later, in the table
                ("sp-900", sp900),
                ("sp-big", encode(session("big", state={"blob": "x" * 80_000}))),
            ],
        )
        produce(
            settings,
            Topic.GATE_RESULTS,
            [
                ("gr-deep", b'{"a":' * 10_000 + b"1" + b"}" * 10_000),
            ],
        )
        produce(settings, Topic.JUDGE_VERDICTS, [("jv-deep", b"[" * 10_000 + b"]" * 10_000)])
        produce(settings, Topic.TRIAL_VERDICTS, [("tv-deep", b'{"a":' * 900 + b"1" + b"}" * 900)])
        runaway = conversation(
            "runaway",
            transcript=[
                Message(role="user", content="hi"),
                Message(role="assistant", content="a" * 5000 + "!"),
            ],
        )
        produce(settings, Topic.CONVERSATION_FINISHED, [("s-runaway", encode(runaway))])
        produce(settings, Topic.SESSION_PERSISTED, [("s-runaway", encode(session("runaway")))])
        # after the poison, on the same topics: a good trial, graded as usual
        produce(settings, Topic.CONVERSATION_FINISHED, [("s-good", encode(conversation("good")))])
        produce(settings, Topic.SESSION_PERSISTED, [("s-good", encode(session("good")))])

        verdicts = read_topic(settings, Topic.TRIAL_VERDICTS, min_count=3, timeout=90)
        wait_for(lambda: settled(settings, PROCESSORS), timeout=120, what="all inputs consumed")
        dead = read_topic(settings, Topic.DEAD_LETTERS)

    outcomes = {v["trial_id"]: v["outcome"] for _, v, _ in verdicts if "trial_id" in v}
    assert outcomes == {"good": "passed", "runaway": "passed"}, verdicts
    letters = reasons_by_key(dead)
    assert letters["cf-deep"] == {"gate": "too_deep", "judge": "too_deep", "sink": "too_deep"}
    assert letters["sp-deep"] == {"gate": "too_deep"}
    assert letters["sp-900"] == {"gate": "too_deep"}
    assert letters["sp-big"] == {"gate": "session_too_large"}
    assert letters["gr-deep"] == {"verdict": "too_deep", "sink": "too_deep"}
    assert letters["jv-deep"] == {"verdict": "too_deep", "sink": "too_deep"}
    assert letters["tv-deep"] == {"sink": "too_deep"}
    # the original bytes are kept, so the record can be inspected or replayed
    sp = next(d for _, d, _ in dead if base64.b64decode(d["key_b64"]) == b"sp-900")
    assert base64.b64decode(sp["value_b64"]) == sp900
    text = log.read_text(errors="replace")
    assert "RecursionError" not in text and "Crashed" not in text


def test_the_calibration_worker_holds_to_the_configured_depth_bound(
    settings: Settings, tmp_path: Path
) -> None:
    """PASSK_MAX_JSON_DEPTH bounds the calibration's inputs like every other processor's
    (it used to decode with the codec's default of 64 whatever the setting said)."""
    env = isolated_env(settings, PASSK_MAX_JSON_DEPTH="8")
    with workers(settings, ["calibration"], env, tmp_path / "workers.log"):
        produce(
            settings,
            Topic.JUDGE_VERDICTS,
            [
                ("jv-12", deep(judge_verdict("tone", trial="jv-12"), 12)),
            ],
        )
        dead = read_topic(settings, Topic.DEAD_LETTERS, min_count=1, timeout=90)
    assert reasons_by_key(dead)["jv-12"] == {"calibration": "too_deep"}
