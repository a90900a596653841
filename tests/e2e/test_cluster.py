"""Scale-out on a three-node cluster this test starts itself (`PASSK_KAFKA_BROKERS=3`
kafka-up): two workers of every processor, a replay of a few thousand trials, and during
it one broker SIGKILLed for good, one worker of each processor SIGKILLed, and a third
gate worker started. Every trial gets exactly its outcome, once; every group drains;
`passk status` names the members and the broker that leads each input partition."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from services.cli.status import input_leaders
from services.contract.processors import WORKERS
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.kafka_client import kafka_client_kwargs
from services.storage.store import Store
from tests.e2e.conftest import Pipeline, assert_each_trial_once_as_expected, free_port
from tests.own_kafka import OwnKafka, own_kafka
from tests.support import ROOT, isolated_env, new_prefix, settled, wait_for

# Eight workers and three brokers on two shared cores take 20-25 minutes: opt-in, not in
# every `make test` (PASSK_CLUSTER_TEST=1 runs it; see docs/testing.md).
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(3000),
    pytest.mark.xdist_group(__name__),  # the module's three brokers start once, on one worker
    pytest.mark.skipif(
        os.environ.get("PASSK_CLUSTER_TEST") != "1",
        reason="heavy: set PASSK_CLUSTER_TEST=1 to run the three-broker test",
    ),
]
SCENARIOS = ROOT / "examples" / "scenarios"
# 5 example scenarios x 500: 2,500 trials (figures in docs/notes/faust-notes.md).
TRIALS_PER_SCENARIO = 500
LOST_BROKER = 2


def test_commands_and_a_starting_worker_answer_right_after_a_broker_loss(
    tmp_path: Path,
) -> None:
    """Until the controller fences a lost broker (broker.session.timeout.ms, 9 s) it stays
    in the cluster's metadata, and kafka-python's admin client sends a request to a node
    drawn at random from it: a worker started then exited 4 ("broker unreachable") and
    `passk status` said the same while two brokers answered (the cluster test's third gate
    worker, once in four runs). Each check below is made again and again in that window."""
    from services.cli.main import refuse_unless_co_partitioned
    from services.cli.status import processor_status
    from services.contract.processors import PROCESSORS
    from services.contract.settings import get_settings
    from services.kafka.admin import partition_counts

    with own_kafka(tmp_path / "kafka", brokers=3) as kafka:
        settings = Settings(  # type: ignore[call-arg]
            KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap,
            PASSK_TOPIC_PREFIX=new_prefix(),
            PASSK_DATABASE_URL=f"sqlite:///{tmp_path / 'passk.db'}",
            PASSK_DATA_DIR=str(tmp_path / "data"),
        )
        env = isolated_env(settings, COLUMNS="200")
        pipeline = Pipeline(settings, env, tmp_path)
        assert pipeline.passk("topics", "create").returncode == 0
        # one gate worker before the loss, a second one started right after it
        pipeline.start_worker("gate", "gate-1")
        wait_for(
            lambda: _members(settings, ["gate"], 1),
            timeout=300,
            interval=1.0,
            what="the first gate worker in its group",
        )
        joined = [topic_name(t, settings) for t in PROCESSORS["gate"].co_partitioned]
        leaders = input_leaders(["gate"], settings)
        assert any(p.leader == LOST_BROKER for p in leaders), leaders
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # the worker's own start-up checks read the settings
        get_settings.cache_clear()
        try:
            kafka.kill(LOST_BROKER)
            lost_at = time.monotonic()
            pipeline.start_worker("gate", "gate-2")
            # `passk status` as an operator runs it, three times in the first seconds
            statuses = []
            for _ in range(3):
                statuses.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "services.cli", "status", "--processors", "gate"],
                        env=env,
                        cwd=ROOT,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
                time.sleep(1.0)
            # a worker's start-up checks and the status leader table, as often as they go
            checks = 0
            while time.monotonic() - lost_at < 12:
                counts = partition_counts(joined, settings)
                assert counts == dict.fromkeys(joined, settings.topic_partitions), counts
                refuse_unless_co_partitioned("gate", settings)
                assert len(input_leaders(["gate"], settings)) == len(leaders)
                checks += 1
            [gate] = processor_status(["gate"], settings)
            assert gate.state not in ("Unknown", "broker unreachable"), gate
            for proc in statuses:
                out, err = proc.communicate(timeout=300)
                assert proc.returncode in (0, 1), out + err  # 4 was "broker unreachable"
                assert "Traceback" not in err and "Unknown" not in out, out + err
            # the worker started in the window runs and joins the group
            wait_for(
                lambda: _all_running(pipeline) and _members(settings, ["gate"], 2),
                timeout=300,
                interval=1.0,
                what="both gate workers in the group",
            )
            # and once fenced, live brokers lead every partition, the lost one in no ISR
            wait_for(
                lambda: all(
                    p.leader in (1, 3) and LOST_BROKER not in p.in_sync
                    for p in input_leaders(["gate"], settings)
                ),
                timeout=120,
                interval=1.0,
                what="leaders moved off the lost broker",
            )
            status = pipeline.passk("status", "--processors", "gate", "--wait", "120", "--json")
            assert status.returncode == 0, status.stdout + status.stderr
            [row] = json.loads(status.stdout)["processors"]
            assert (row["processor"], row["state"], row["members"]) == ("gate", "Stable", 2), row
            print(f"broker loss: {checks} rounds of start-up checks in the 12 s after it")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            get_settings.cache_clear()
            pipeline.stop_all()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnKafka]:
    with own_kafka(tmp_path_factory.mktemp("kafka-cluster"), brokers=3) as kafka:
        yield kafka


def test_two_workers_each_survive_a_lost_broker_and_killed_workers(
    cluster: OwnKafka, tmp_path: Path
) -> None:
    settings = Settings(  # type: ignore[call-arg]
        KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
        PASSK_TOPIC_PREFIX=new_prefix(),
        PASSK_DATABASE_URL=f"sqlite:///{tmp_path / 'passk.db'}",
        PASSK_DATA_DIR=str(tmp_path / "data"),
        PASSK_SESSION_WAIT_S=20,
        # While a killed worker's partitions move (15 s to notice, a rebalance, a restore,
        # on two shared cores) the verdict waits on the wall clock: give it 15 minutes so
        # an outage is waited out rather than graded `error` (seen at 140 s: 132 errors).
        PASSK_JUDGE_WAIT_S=900,
        # About scale-out, not calibration: uncalibrated judges fail trials, as in conftest.
        PASSK_UNCALIBRATED_JUDGES="gating",
    )
    standin = free_port()
    env = isolated_env(
        settings,
        OPENAI_BASE_URL=f"http://127.0.0.1:{standin}/v1",
        OPENAI_API_KEY="stand-in",
        PASSK_JUDGE_MODEL="passk-standin",
        COLUMNS="200",
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    pipeline = Pipeline(settings, env, logs)
    processors = list(WORKERS)
    run_id = "cluster-run"
    store = Store(settings.database_url)

    def projected() -> int:
        return len(store.trials(run_id)) if store.has_schema() else 0

    try:
        assert pipeline.passk("topics", "create").returncode == 0
        _assert_replicated(settings)
        pipeline.start(
            "judge-standin", "judge-standin", "--host", "127.0.0.1", "--port", str(standin)
        )
        for p in processors:
            for i in (1, 2):
                pipeline.start_worker(p, f"{p}-{i}")
        wait_for(
            lambda: (
                all(proc.poll() is None for proc in pipeline.procs.values())
                and settled(settings, processors)
                and _members(settings, processors, 2)
            ),
            timeout=600,
            interval=2.0,
            what="two live members in every group",
        )
        traffic, expected = pipeline.publish_and_generate(
            SCENARIOS, tmp_path, run_id, trials=TRIALS_PER_SCENARIO, seed=12, pass_prob=0.85
        )
        total = len(expected["trials"])
        assert total >= 2000

        started = time.monotonic()
        replay = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "replay", str(traffic), "--rate", "300"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(
                lambda: projected() >= total // 5,
                timeout=600,
                interval=1.0,
                what="a fifth of the verdicts",
            )
            cluster.kill(LOST_BROKER)  # for good: it is never restarted
            for p in processors:
                pipeline.kill(f"{p}-1")
            pipeline.start_worker("gate", "gate-3")
            assert replay.wait(900) == 0, replay.stdout.read() if replay.stdout else ""
        finally:
            if replay.poll() is None:
                replay.kill()

        wait_for(
            lambda: projected() >= total,
            timeout=900,
            interval=2.0,
            what=f"all {total} verdicts in the projection",
        )
        all_verdicts_s = time.monotonic() - started

        outcome = assert_each_trial_once_as_expected(
            store, settings, run_id, expected, read_timeout=120
        )
        # every group, the survivors and the third gate worker, consumed and committed all
        pipeline.wait_settled(timeout=600, processors=processors)
        settled_s = time.monotonic() - started
        # the figures docs/notes/faust-notes.md quotes (run with -s to see them)
        print(
            f"cluster figures: {total} trials, outcomes {dict(Counter(outcome.values()))}, "
            f"every verdict {all_verdicts_s:.0f} s and every group at lag 0 "
            f"{settled_s:.0f} s after the replay started"
        )

        # every worker still running, the third gate worker too (one that exited during
        # the broker loss would leave its group with a member less)
        _all_running(pipeline)
        # status: the members of each group, and live brokers leading every input partition
        status = pipeline.passk("status", "--processors", ",".join(processors), "--json")
        print(f"passk status (exit {status.returncode}):\n{status.stdout}{status.stderr}")
        assert status.returncode == 0, status.stdout + status.stderr
        _assert_status(status.stdout, settings, processors)
    finally:
        pipeline.stop_all()


def _all_running(pipeline: Pipeline) -> bool:
    """True, or fail with the exit code and log tail of every worker that exited."""
    exited = {n: p.returncode for n, p in pipeline.procs.items() if p.poll() is not None}
    assert not exited, {
        n: (code, (pipeline.logs / f"{n}.log").read_text()[-2000:]) for n, code in exited.items()
    }
    return True


def _members(settings: Settings, processors: list[str], at_least: int) -> bool:
    from services.cli.status import processor_status

    return all(s.members >= at_least for s in processor_status(processors, settings))


def _assert_replicated(settings: Settings) -> None:
    admin = KafkaAdminClient(**kafka_client_kwargs(settings))
    try:
        name = topic_name(Topic.CONVERSATION_FINISHED, settings)
        [topic] = admin.describe_topics([name])
        assert {len(p["replica_nodes"]) for p in topic["partitions"]} == {3}
        from kafka.admin import ConfigResource, ConfigResourceType

        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        assert configs["topic"][name]["min.insync.replicas"]["value"] == "2"
    finally:
        admin.close()


def _assert_status(out: str, settings: Settings, processors: list[str]) -> None:
    said = json.loads(out)
    rows = {r["processor"]: r for r in said["processors"]}
    assert set(rows) == set(processors), rows
    for p in processors:
        want = 2 if p == "gate" else 1  # gate-2 and gate-3; the others lost their -1
        assert (rows[p]["group"], rows[p]["state"], rows[p]["members"], rows[p]["lag"]) == (
            f"{settings.topic_prefix}{p}",
            "Stable",
            want,
            0,
        ), rows[p]
    leaders = input_leaders(processors, settings)
    assert leaders and all(p.leader in (1, 3) for p in leaders), leaders
    assert all(LOST_BROKER not in p.in_sync for p in leaders)
    # and status showed the same leaders
    assert {(p["topic"], p["partition"], p["leader"]) for p in said["input_leaders"]} == {
        (p.topic, p.partition, p.leader) for p in leaders
    }
