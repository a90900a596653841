"""`passk topics create` against the real broker: every topic, its partitions and configs;
running it again changes nothing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import ConfigResource, ConfigResourceType

from services.contract.processors import TOPIC_SPECS
from services.contract.settings import Settings
from services.contract.topics import Topic, partitions_for, topic_configs, topic_name
from tests.support import ROOT, isolated_env, new_prefix, wait_for

pytestmark = pytest.mark.integration

DESIGN_TOPICS = {
    Topic.CONVERSATION_FINISHED,
    Topic.SESSION_PERSISTED,
    Topic.SCENARIOS,
    Topic.JUDGE_VERDICTS,
    Topic.GATE_RESULTS,
    Topic.TRIAL_VERDICTS,
    Topic.SCENARIO_RELIABILITY,
    Topic.LABELS,
    Topic.DEAD_LETTERS,
}


@pytest.fixture
def admin(kafka_bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=kafka_bootstrap, request_timeout_ms=10_000)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def fresh(kafka_bootstrap: str, tmp_path: Path, admin: KafkaAdminClient) -> Iterator[Settings]:
    """Settings on a prefix nobody has created topics for; its topics are removed afterwards."""
    settings = Settings(  # type: ignore[call-arg]
        KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        PASSK_TOPIC_PREFIX=new_prefix(),
        PASSK_DATABASE_URL=f"sqlite:///{tmp_path / 'passk.db'}",
        PASSK_DATA_DIR=str(tmp_path / "data"),
    )
    assert ours(admin, settings) == set()
    yield settings
    leftovers = ours(admin, settings)
    if leftovers:
        admin.delete_topics(sorted(leftovers))


def ours(admin: KafkaAdminClient, settings: Settings) -> set[str]:
    return {t for t in admin.list_topics() if t.startswith(settings.topic_prefix)}


def topics_create(settings: Settings, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "topics", "create"],
        cwd=ROOT,
        env=isolated_env(settings, COLUMNS="250", **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def statuses(output: str, settings: Settings) -> dict[str, str]:
    """The status printed on each topic's row of the table."""
    found = {}
    for spec in TOPIC_SPECS:
        name = topic_name(spec.topic, settings)
        rows = [line for line in output.splitlines() if f" {name} " in line]
        assert len(rows) == 1, f"{name} not listed once in:\n{output}"
        found[name] = next((w for w in ("created", "exists") if w in rows[0]), rows[0])
    return found


def described(admin: KafkaAdminClient, settings: Settings) -> dict[str, dict[str, Any]]:
    """Per topic: its id, partition count, and the configs set on it."""
    names = sorted(topic_name(s.topic, settings) for s in TOPIC_SPECS)
    topics = {t["name"]: t for t in admin.describe_topics(names)}
    configs = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
    )["topic"]
    return {
        name: {
            "topic_id": topics[name]["topic_id"],
            "partitions": len(topics[name]["partitions"]),
            "configs": {k: v["value"] for k, v in configs[name].items()},
        }
        for name in names
    }


def test_creates_every_topic_with_its_partitions_and_configs(
    fresh: Settings, admin: KafkaAdminClient
) -> None:
    done = topics_create(fresh)
    assert done.returncode == 0, done.stderr
    assert set(statuses(done.stdout, fresh).values()) == {"created"}

    expected = {topic_name(s.topic, fresh) for s in TOPIC_SPECS}
    # A loaded broker's metadata can trail the CreateTopics answers by a moment.
    wait_for(
        lambda: ours(admin, fresh) == expected,
        timeout=30,
        what="every topic in the broker's metadata",
    )
    actual = described(admin, fresh)
    for spec in TOPIC_SPECS:
        name = topic_name(spec.topic, fresh)
        assert actual[name]["partitions"] == partitions_for(spec, fresh), name
        assert topic_configs(spec, fresh).items() <= actual[name]["configs"].items(), name

    scenarios = actual[topic_name(Topic.SCENARIOS, fresh)]
    assert scenarios["configs"]["cleanup.policy"] == "compact"
    assert "retention.ms" not in scenarios["configs"]  # compaction keeps the latest forever
    for topic in DESIGN_TOPICS - {Topic.SCENARIOS}:
        got = actual[topic_name(topic, fresh)]
        assert got["configs"]["cleanup.policy"] == "delete", topic
        assert got["configs"]["retention.ms"] == "-1", topic
        assert got["partitions"] == 8, topic


def test_running_it_twice_changes_nothing(fresh: Settings, admin: KafkaAdminClient) -> None:
    first = topics_create(fresh)
    assert first.returncode == 0, first.stderr
    before = wait_for(
        lambda: (lambda d: d if all(t["partitions"] for t in d.values()) else None)(
            described(admin, fresh)
        ),
        timeout=30,
        what="every new topic described with its partitions",
    )

    second = topics_create(fresh)
    assert second.returncode == 0, second.stderr
    assert set(statuses(second.stdout, fresh).values()) == {"exists"}
    # Same topics (not deleted and recreated), same partitions, same configs.
    assert described(admin, fresh) == before


def test_partitions_and_retention_come_from_the_environment(
    fresh: Settings, admin: KafkaAdminClient
) -> None:
    week_ms = str(7 * 24 * 3600 * 1000)
    done = topics_create(fresh, PASSK_TOPIC_PARTITIONS="3", PASSK_TOPIC_RETENTION_MS=week_ms)
    assert done.returncode == 0, done.stderr
    actual = described(admin, fresh)
    labels = actual[topic_name(Topic.LABELS, fresh)]
    assert labels["partitions"] == 3
    assert labels["configs"]["retention.ms"] == week_ms
    assert actual[topic_name(Topic.SCENARIOS, fresh)]["partitions"] == 1


def test_single_broker_topics_have_one_replica_and_min_insync_one(
    fresh: Settings, admin: KafkaAdminClient
) -> None:
    assert topics_create(fresh).returncode == 0
    name = topic_name(Topic.CONVERSATION_FINISHED, fresh)
    [topic] = admin.describe_topics([name])
    assert {len(p["replica_nodes"]) for p in topic["partitions"]} == {1}
    assert described(admin, fresh)[name]["configs"]["min.insync.replicas"] == "1"


@pytest.mark.parametrize(
    ("processor", "odd_one"), [("gate", Topic.SESSION_PERSISTED), ("verdict", Topic.JUDGE_VERDICTS)]
)
def test_a_worker_refuses_inputs_that_are_not_co_partitioned(
    fresh: Settings, admin: KafkaAdminClient, processor: str, odd_one: Topic
) -> None:
    from kafka.admin import NewTopic

    odd = topic_name(odd_one, fresh)
    admin.create_topics([NewTopic(odd, 3, 1)])  # the rest will get the default 8
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "worker", processor],
        cwd=ROOT,
        env=isolated_env(fresh),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"passk worker {processor}: refusing to start" in result.stderr
    assert f"{odd_one.value}=3" in result.stderr
    assert "must have equal partition counts" in result.stderr
    assert "Traceback" not in result.stderr


def test_created_topics_are_served_when_the_command_returns(fresh: Settings) -> None:
    """`passk topics create` returns once the broker serves every topic it created (a
    leader for each partition), so the next command never reads "no such topic": a
    loaded broker's metadata once trailed the CreateTopics answers, and `scenarios
    publish` or `replay` right after failed."""
    done = topics_create(fresh)
    assert done.returncode == 0, done.stderr
    consumer = KafkaConsumer(bootstrap_servers=fresh.kafka_bootstrap_servers)
    try:
        unserved = [
            s.topic
            for s in TOPIC_SPECS
            if not consumer.partitions_for_topic(topic_name(s.topic, fresh))
        ]
    finally:
        consumer.close()
    assert unserved == []
