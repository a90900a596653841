"""`passk generate` + `passk replay` against the real broker: every event on its topic, on
the partition its session key maps to, in file order per key; bad lines reported by number
and never sent; what kafka-python wrote, aiokafka (Faust's driver) reads back as models."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.partitioner.default import murmur2

from schemas.events import ConversationFinished, SessionPersisted
from services.contract.codec import Rejection
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.producer import TrafficProducer
from services.replay.replay import replay_file
from tests.integration.test_transport import consume
from tests.support import ROOT, isolated_env, new_prefix, read_topic

pytestmark = pytest.mark.integration

SCENARIOS = {
    # the shipped example (examples/scenarios/), and a small one beside it
    "billable.yaml": (ROOT / "examples" / "scenarios" / "debrief-billable-repair.yaml").read_text(),
    "warranty.yaml": """
id: warranty-no-charge
trials: 3
expected_exit: [product_closed, handed_off]
outcome:
  - {path: warranty.claim_id, present: true}
""",
}
TYPE_TOPIC = {
    "conversation_finished": Topic.CONVERSATION_FINISHED,
    "session_persisted": Topic.SESSION_PERSISTED,
}
MODELS = {
    Topic.CONVERSATION_FINISHED: ConversationFinished,
    Topic.SESSION_PERSISTED: SessionPersisted,
}


def passk(args: list[str], settings: Settings) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=isolated_env(settings, COLUMNS="200"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def expected_partition(key: bytes, partitions: int) -> int:
    # kafka-python's DefaultPartitioner (Java-compatible murmur2), which the producer uses
    return (murmur2(key) & 0x7FFFFFFF) % partitions


async def read_with_aiokafka(
    settings: Settings, count: int, timeout: float = 60.0
) -> list[tuple[Topic, bytes | None, int, Any]]:
    by_name = {topic_name(t, settings): t for t in MODELS}
    read = await consume(settings, {name: MODELS[t] for name, t in by_name.items()}, count, timeout)
    return [(by_name[name], key, partition, event) for name, key, partition, event in read]


@pytest.fixture
def scenario_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    for name, text in SCENARIOS.items():
        (folder / name).write_text(text)
    return folder


async def test_generated_traffic_lands_keyed_partitioned_and_in_file_order(
    settings: Settings, scenario_dir: Path, tmp_path: Path
) -> None:
    traffic, expected = tmp_path / "traffic.jsonl", tmp_path / "expected.json"
    gen = passk(
        [
            "generate",
            "--scenarios",
            str(scenario_dir),
            "--run-id",
            "it-run",
            "--out",
            str(traffic),
            "--expected",
            str(expected),
            "--trials",
            "4",
            "--every-mode",
            "--seed",
            "11",
            "--pass-prob",
            "warranty-no-charge=1.0",
        ],
        settings,
    )
    assert gen.returncode == 0, gen.stdout + gen.stderr
    assert "billable-repair" in gen.stdout and "warranty-no-charge" in gen.stdout
    rows = [json.loads(line) for line in traffic.read_text().splitlines()]
    plan = json.loads(expected.read_text())
    quirks = {q for t in plan["trials"] for q in t["quirks"]}
    assert {"session_early", "session_late", "duplicated", "session_missing"} <= quirks

    replay = passk(["replay", str(traffic)], settings)
    assert replay.returncode == 0, replay.stdout + replay.stderr

    per_topic = defaultdict(list)
    for row in rows:
        per_topic[TYPE_TOPIC[row["type"]]].append(row)
    partitions = settings.topic_partitions
    landed: dict[str, set[int]] = defaultdict(set)
    for topic, written in per_topic.items():
        records = read_topic(settings, topic, min_count=len(written))
        assert len(records) == len(written)  # duplicates included, nothing else
        by_key_on_broker: dict[bytes, list[str]] = defaultdict(list)
        for key, value, partition in records:
            assert value["type"] == written[0]["type"]  # the right topic
            assert key == value["session_id"].encode("utf-8")
            assert partition == expected_partition(key, partitions)
            landed[value["session_id"]].add(partition)
            by_key_on_broker[key].append(value["event_id"])
        by_key_in_file: dict[bytes, list[str]] = defaultdict(list)
        for row in written:
            by_key_in_file[row["session_id"].encode()].append(row["event_id"])
        assert by_key_on_broker == by_key_in_file
    # both events of one session share a partition number, so one gate worker sees both
    assert all(len(p) == 1 for p in landed.values())

    # aiokafka reads back the same events, and they decode to the models
    consumed = await read_with_aiokafka(settings, len(rows))
    assert len(consumed) == len(rows)
    for topic, key, partition, event in consumed:
        assert not isinstance(event, Rejection), event
        assert isinstance(event, MODELS[topic])
        assert key == event.session_id.encode() and partition == expected_partition(key, partitions)
    assert sorted(e.event_id for *_, e in consumed) == sorted(r["event_id"] for r in rows)


def test_bad_lines_are_reported_by_number_and_only_good_lines_sent(
    settings: Settings, tmp_path: Path
) -> None:
    good_conv = {
        "event_id": "cf-g1",
        "type": "conversation_finished",
        "run_id": "r",
        "scenario_id": "sc",
        "trial_id": "t-g1",
        "session_id": "s-g1",
        "exit_reason": "product_closed",
        "transcript": [{"role": "user", "content": "hi"}],
    }
    good_sess = {
        "event_id": "sp-g1",
        "type": "session_persisted",
        "session_id": "s-g1",
        "state": {"report": {"fault": "pump"}},
    }
    lines = [
        json.dumps(good_conv),  # 1
        "{this is not json",  # 2
        json.dumps({**good_sess, "session_id": ""}),  # 3: empty key
        json.dumps({"type": "label", "event_id": "l1"}),  # 4: not replayable
        json.dumps(good_sess),  # 5
        json.dumps({**good_conv, "event_id": "cf-bad", "transcript": "nope"}),  # 6
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")

    result = passk(["replay", str(path)], settings)
    out = result.stderr  # warnings go to stderr; the summary table to stdout
    assert result.returncode == 0, result.stdout + out  # skipped lines warn, they don't fail
    for lineno, reason in [
        (2, "invalid_json"),
        (3, "invalid_field"),
        (4, "unknown_type"),
        (6, "invalid_field"),
    ]:
        assert f"line {lineno}: {reason}" in out, out
    assert "line 1:" not in out and "line 5:" not in out
    assert "4 invalid line(s) skipped" in out

    convs = read_topic(settings, Topic.CONVERSATION_FINISHED, min_count=1)
    sessions = read_topic(settings, Topic.SESSION_PERSISTED, min_count=1)
    assert [v["event_id"] for _, v, _ in convs] == ["cf-g1"]
    assert [v["event_id"] for _, v, _ in sessions] == ["sp-g1"]

    dry = passk(["replay", "--dry-run", str(path)], settings)
    assert dry.returncode == 0 and "line 2: invalid_json" in dry.stderr
    assert len(read_topic(settings, Topic.CONVERSATION_FINISHED)) == 1  # dry run sent nothing


def test_producer_sdk_sends_models_and_reports_a_missing_topic(
    settings: Settings, tmp_path: Path
) -> None:
    conv = ConversationFinished(
        event_id="cf-sdk",
        run_id="r",
        scenario_id="sc",
        trial_id="t",
        session_id="s-sdk",
        exit_reason="product_closed",
        transcript=[],
    )
    sess = SessionPersisted(event_id="sp-sdk", session_id="s-sdk", state={"x": 1})
    with TrafficProducer(settings) as producer:
        futures = [producer.send(conv), producer.send(sess)]
        producer.flush(30)
        assert all(f.succeeded() for f in futures)
        assert producer.acked == {
            topic_name(Topic.CONVERSATION_FINISHED, settings): 1,
            topic_name(Topic.SESSION_PERSISTED, settings): 1,
        }
        assert producer.report().undelivered == ()
    [(key, value, _)] = read_topic(settings, Topic.SESSION_PERSISTED, min_count=1)
    assert key == b"s-sdk" and value["state"] == {"x": 1}

    # Topics that were never created: every send fails, is reported, exit code 4,
    # and no topic is auto-created behind the operator's back.
    missing = settings.model_copy(update={"topic_prefix": new_prefix()})
    path = tmp_path / "one.jsonl"
    path.write_text(conv.model_dump_json() + "\n" + sess.model_dump_json() + "\n")
    with TrafficProducer(missing, max_block_ms=2000) as producer:
        summary = replay_file(path, sender=producer, settings=missing)
    assert summary.exit_code == 4
    assert [u.ref for u in summary.undelivered] == ["line 1", "line 2"]
    # `passk replay` refuses up front, naming the topics, instead of timing out per topic
    result = passk(["replay", str(path)], missing)
    assert result.returncode == 4  # the infrastructure is not there
    assert f"missing topics: {topic_name(Topic.CONVERSATION_FINISHED, missing)}" in result.stderr
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    try:
        assert not [t for t in admin.list_topics() if t.startswith(missing.topic_prefix)]
    finally:
        admin.close()


def test_rate_paces_the_sends(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "paced.jsonl"
    path.write_text(
        "".join(
            SessionPersisted(event_id=f"sp-{i}", session_id=f"s-{i}", state={}).model_dump_json()
            + "\n"
            for i in range(10)
        )
    )
    with TrafficProducer(settings) as producer:
        started = time.monotonic()
        summary = replay_file(path, sender=producer, settings=settings, rate=20.0)
        elapsed = time.monotonic() - started
    assert summary.exit_code == 0 and sum(summary.sent.values()) == 10
    assert elapsed >= 9 / 20.0  # ten sends at 20/s cannot take less than nine gaps
