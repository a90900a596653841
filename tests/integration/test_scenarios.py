"""Publishing scenarios to the real broker, and the catalog every processor reads."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from services.contract.scenario_records import decode_scenario
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.grading.scenario_loader import load_scenarios
from services.kafka.catalog import ScenarioCatalog, load_catalog, read_catalog
from services.scenarios.publish import publish_paths, publish_scenarios
from tests.support import ROOT, isolated_env, read_topic

pytestmark = pytest.mark.integration

EXAMPLES = ROOT / "examples" / "scenarios"
INVALID = ROOT / "examples" / "invalid"
EXAMPLE_IDS = {
    "debrief-billable-repair",
    "debrief-warranty-no-charge",
    "debrief-follow-up-required",
    "debrief-safety-incident",
    "debrief-quick-question",
}


def passk(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "services.cli", *args],
        env=isolated_env(settings, COLUMNS="240"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_scenarios_topic_is_compacted(settings: Settings) -> None:
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    try:
        name = topic_name(Topic.SCENARIOS, settings)
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    finally:
        admin.close()
    # kafka-python 3 answers {"topic": {name: {config: {"value": ...}}}}
    assert described["topic"][name]["cleanup.policy"]["value"] == "compact"


def test_publishing_the_examples_lands_every_scenario_keyed_by_id_and_version(
    settings: Settings,
) -> None:
    done = passk(settings, "scenarios", "publish", str(EXAMPLES))
    assert done.returncode == 0, done.stdout + done.stderr
    for scenario_id in EXAMPLE_IDS:
        assert scenario_id in done.stdout
    assert done.stdout.count("new") >= len(EXAMPLE_IDS)

    records = read_topic(settings, Topic.SCENARIOS, min_count=len(EXAMPLE_IDS))
    assert len(records) == len(EXAMPLE_IDS)
    expected = {s.id: s for s in load_scenarios(EXAMPLES).scenarios}
    for key, value, _partition in records:
        # a key per version, so compaction never drops one a late trial names
        assert key is not None and key.decode() == f"{value['id']}@{value['version']}"
        assert value["version"] == expected[value["id"]].version
    assert {key.decode().split("@")[0] for key, _, _ in records if key} == EXAMPLE_IDS

    # The same content again: same versions, nothing new on the log.
    again = passk(settings, "scenarios", "publish", str(EXAMPLES))
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("unchanged") == len(EXAMPLE_IDS)
    assert len(read_topic(settings, Topic.SCENARIOS)) == len(EXAMPLE_IDS)

    listed = passk(settings, "scenarios", "list")
    assert listed.returncode == 0, listed.stderr
    for scenario in expected.values():
        assert scenario.id in listed.stdout and scenario.version in listed.stdout

    latest = load_catalog(settings)
    assert {s: latest[s].version for s in latest} == {s: expected[s].version for s in expected}


async def test_the_catalog_serves_latest_and_every_version_and_follows_updates(
    settings: Settings,
) -> None:
    _, steps = await asyncio.to_thread(publish_paths, [EXAMPLES], settings)
    first = {p.scenario.id: p.scenario for p in steps}
    assert {p.status for p in steps} == {"new"}

    catalog = ScenarioCatalog(settings)
    await catalog.ready()
    try:
        await catalog.ready()  # idempotent
        for scenario_id, scenario in first.items():
            assert catalog.get(scenario_id) == scenario
            assert catalog.get(scenario_id, scenario.version) == scenario
        assert catalog.get("no-such-scenario") is None

        # A changed scenario is re-published while the catalog runs.
        old = first["debrief-billable-repair"]
        changed = old.model_copy(update={"trials": 5, "version": None}).versioned()
        assert changed.version != old.version
        published = await asyncio.to_thread(publish_scenarios, [changed], settings)
        assert [p.status for p in published] == ["updated"]

        got = await catalog.wait_for(old.id, changed.version, timeout=30)
        assert got is not None and got.trials == 5
        assert catalog.get(old.id) == changed  # latest is the new version
        assert catalog.get(old.id, old.version) == old  # the old one stays gettable
        assert set(catalog.latest()) == EXAMPLE_IDS
    finally:
        await catalog.stop()

    # A catalog started afterwards reads both versions from the log.
    fresh = ScenarioCatalog(settings)
    await fresh.ready()
    try:
        assert fresh.get(old.id).version == changed.version  # type: ignore[union-attr]
        assert fresh.get(old.id, old.version) == old
    finally:
        await fresh.stop()
    state = await asyncio.to_thread(read_catalog, settings)
    assert state.versions(old.id) == [old.version, changed.version]


async def test_a_malformed_record_is_skipped_and_the_catalog_goes_on(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    name = topic_name(Topic.SCENARIOS, settings)
    scenario = load_scenarios(EXAMPLES / "debrief-safety-incident.yaml").scenarios[0]

    def send_garbage() -> None:
        producer = KafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all")
        producer.send(name, key=b"broken", value=b"{this is not json")
        producer.send(name, key=b"half", value=b'{"id": "half"}')
        producer.flush()
        producer.close()

    await asyncio.to_thread(send_garbage)
    catalog = ScenarioCatalog(settings)
    await catalog.ready()
    try:
        assert catalog.latest() == {}
        assert "skipping malformed scenario record" in caplog.text
        await asyncio.to_thread(publish_scenarios, [scenario], settings)
        got = await catalog.wait_for(scenario.id, timeout=30)
        assert got == scenario
    finally:
        await catalog.stop()
    assert set(load_catalog(settings)) == {scenario.id}


def test_an_invalid_file_among_valid_ones_publishes_nothing_and_exits_2(
    settings: Settings,
) -> None:
    done = passk(settings, "scenarios", "publish", str(INVALID), str(EXAMPLES))
    assert done.returncode == 2, done.stdout + done.stderr
    out = done.stdout + done.stderr
    lines = out.splitlines()
    for file, field, problem in [
        ("examples/invalid/bad-regex.yaml", "outcome[2].matches", "not a valid regular expression"),
        ("examples/invalid/unknown-field.yaml", "outcome[1].equal", "unknown field 'equal'"),
        ("examples/invalid/unknown-field.yaml", "judge", "unknown field 'judge'"),
    ]:
        assert any(file in line and field in line and problem in line for line in lines), out
    assert "nothing was published" in out

    # Nothing reached the topic (read it to its end), and the catalog is empty.
    assert read_topic(settings, Topic.SCENARIOS) == []
    assert load_catalog(settings) == {}


def test_records_on_the_topic_decode_as_versioned_scenarios(settings: Settings) -> None:
    publish_paths([EXAMPLES], settings)
    for _key, value, _ in read_topic(settings, Topic.SCENARIOS, min_count=len(EXAMPLE_IDS)):
        scenario = decode_scenario(json.dumps(value).encode())
        assert scenario.version == scenario.content_hash()


def test_a_small_file_and_a_2mb_file_publish_nothing(settings: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    small = (ROOT / "examples" / "scenarios" / "debrief-billable-repair.yaml").read_text()
    (tmp_path / "a-small.yaml").write_text(small)
    (tmp_path / "b-big.yaml").write_text(
        small.replace("debrief-billable-repair", "big") + "description2: " + "x" * 2_000_000
    )
    done = passk(settings, "scenarios", "publish", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "b-big.yaml" in done.stderr and "above the limit" in done.stderr
    assert "nothing was published" in done.stderr
    assert read_topic(settings, Topic.SCENARIOS) == []


def test_a_set_the_broker_refuses_half_way_is_not_read_at_all(settings: Settings) -> None:
    """Past validation (which would refuse it): the set is one transaction, so the record
    sent before the refused one is aborted with it and no reader sees it."""
    from kafka.errors import KafkaError

    from tests.unit.factories import scenario

    good = scenario(id="small")
    big = scenario(id="big", description="x" * 2_000_000)
    with pytest.raises(KafkaError):
        publish_scenarios([good, big], settings)
    assert load_catalog(settings) == {}
    assert read_catalog(settings).latest() == {}
    publish_scenarios([good], settings)  # the transactional id is usable again
    assert set(load_catalog(settings)) == {"small"}


def test_800_nested_brackets_beside_a_valid_file_exit_2_naming_file_and_line(
    settings: Settings, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Issue 21, item 3, as the red team sent it: a 1.6 KB file of 800 nested `[` crashed
    `publish` with a RecursionError traceback (exit 1). And `trials: 1000000` was taken."""
    small = (ROOT / "examples" / "scenarios" / "debrief-billable-repair.yaml").read_text()
    (tmp_path / "a-valid.yaml").write_text(small)
    (tmp_path / "b-deep.yaml").write_text(
        "id: deep\nexpected_exit: product_closed\noutcome: " + "[" * 800 + "]" * 800 + "\n"
    )
    (tmp_path / "c-many.yaml").write_text(
        small.replace("debrief-billable-repair", "many").replace("trials: 3", "trials: 1000000")
    )
    assert "trials: 1000000" in (tmp_path / "c-many.yaml").read_text()
    done = passk(settings, "scenarios", "publish", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr
    lines = done.stderr.splitlines()
    assert any(
        "b-deep.yaml" in line and "nests deeper than 64 levels" in line and "line 3" in line
        for line in lines
    ), done.stderr
    assert any(
        "c-many.yaml" in line and "trials" in line and "above the maximum of 1000" in line
        for line in lines
    ), done.stderr
    assert "nothing was published" in done.stderr
    assert "held back with the set" in done.stderr and "a-valid.yaml" in done.stderr
    assert read_topic(settings, Topic.SCENARIOS) == []
