"""Two workers of a processor on the shared broker, one SIGKILLed mid-replay and never
restarted: the survivor takes over the dead worker's partitions in a rebalance (its own
consumer keeps running; nothing restarts) and must drain them. Every trial gets exactly
its outcome, once, and the groups drain to zero lag.

The three-broker test (`test_cluster.py`, opt-in, 20+ minutes) found survivors stalling on
the partitions they took over: Faust recorded a rebalance's seek after the drain loop had
already read from it (services/runtime/faust_compat/seek_guard.py). That race needs a slow
offset read during the rebalance, which a lost broker gave there and an idle one seldom
gives here, so `tests/unit/runtime/faust_compat/test_seek_guard_real.py` shows it deterministically;
this is the same take-over through real processes, cheap enough for `make test` (about
2 minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from services.cli.status import processor_status
from services.contract.processors import PROCESSORS as REGISTRY
from services.contract.settings import Settings
from services.contract.topics import topic_name
from services.kafka.kafka_client import kafka_client_kwargs
from services.storage.store import Store
from tests.e2e.conftest import (
    PROCESSORS,
    assert_each_trial_once_as_expected,
    assert_replayed,
    running_pipeline,
    trials_in,
)
from tests.support import ROOT, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800), pytest.mark.alone]
SCENARIOS = ROOT / "examples" / "scenarios"
TRIALS_PER_SCENARIO = 300  # 5 scenarios: 1,500 trials, about 2,600 input events
DOUBLED = PROCESSORS  # two workers of every processor, as in the cluster test


def test_survivor_drains_the_partitions_of_a_killed_worker(
    settings: Settings, tmp_path: Path
) -> None:
    # Judges wait long enough that a trial whose partition is between owners is waited
    # for, not graded `error`: this test is about losing nothing, not about deadlines.
    # Both workers of each processor start together; the first is the one killed below.
    with running_pipeline(
        settings,
        tmp_path,
        PROCESSORS,
        second_instances=tuple(DOUBLED),
        settle_timeout=420,
        PASSK_JUDGE_WAIT_S="300",
    ) as pipeline:
        wait_for(
            lambda: all(
                s.members == 2 and s.settled for s in processor_status(list(DOUBLED), settings)
            ),
            timeout=300,
            interval=1.0,
            what="two settled members in every group",
        )

        run_id = "scale-out"
        traffic, expected = pipeline.publish_and_generate(
            SCENARIOS, tmp_path, run_id, trials=TRIALS_PER_SCENARIO, seed=21, pass_prob=0.85
        )
        total = len(expected["trials"])
        store = Store(settings.database_url)

        with pipeline.replaying(traffic, rate=100) as replay:
            wait_for(
                lambda: trials_in(store, run_id) >= total // 5,
                timeout=600,
                interval=0.5,
                what="a fifth of the verdicts",
            )
            for name in DOUBLED:
                pipeline.kill(name)  # for good: its partitions must move to `name-2`
            assert_replayed(replay, 900)

        try:
            wait_for(
                lambda: trials_in(store, run_id) >= total,
                timeout=600,
                interval=1.0,
                what=f"all {total} verdicts in the projection",
            )
            pipeline.wait_settled(timeout=300)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_behind(settings)}") from None

        assert_each_trial_once_as_expected(store, settings, run_id, expected)
        # the survivors hold every partition now
        assert all(s.members == 1 for s in processor_status(list(DOUBLED), settings))


def _behind(settings: Settings) -> str:
    """Per input partition still behind: group, partition, committed, end (a diagnosis)."""
    kwargs = kafka_client_kwargs(settings)
    admin, consumer = KafkaAdminClient(**kwargs), KafkaConsumer(**kwargs)
    lines = []
    try:
        for processor in PROCESSORS:
            group = f"{settings.topic_prefix}{processor}"
            committed = admin.list_group_offsets({group: None}).get(group) or {}
            tps = [
                TopicPartition(topic_name(t, settings), p)
                for t in REGISTRY[processor].inputs
                for p in consumer.partitions_for_topic(topic_name(t, settings)) or ()
            ]
            ends = consumer.end_offsets(tps)
            for tp in tps:
                done = committed.get(tp)
                at = done.offset if done is not None else None
                if (at or 0) < ends[tp]:
                    lines.append(
                        f"{processor} {tp.topic}[{tp.partition}] committed {at} end {ends[tp]}"
                    )
    finally:
        consumer.close()
        admin.close()
    return "\n".join(lines) or "every input partition committed to its end"
