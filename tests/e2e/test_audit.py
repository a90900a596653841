"""`passk audit` and `passk audit --repair` through the real broker and every worker, as an
operator runs them: trials made to go missing on purpose at three stages (a gate result
that never comes, a projection row deleted, an aggregate count written wrong into its
changelog before a restart) are each reported with the right `stopped_at`; the repair
leaves the audit clean, and every figure (report --json, windows --json) equals a count
made here from the traffic sent and the generator's expected outcomes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.kafka_client import kafka_client_kwargs
from tests.e2e.conftest import BIN, Pipeline, running_pipeline, supervise_config, supervisord
from tests.support import ROOT, read_topic, settled, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.alone]
SCENARIOS = ROOT / "examples" / "scenarios"
WORKERS = ["gate", "verdict", "judge", "sink"]  # the aggregate runs under supervisord


def audit(p: Pipeline, *args: str, expect: int | None = None) -> dict[str, Any]:
    done = p.passk("audit", "--json", "--grace", "0", *args, timeout=600)
    if expect is not None:
        assert done.returncode == expect, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def group_members(settings: Settings, group: str) -> int:
    from services.cli.pause import group_members as members

    return members(group, settings)


def commit_past_everything(settings: Settings, group: str, *topics: Topic) -> None:
    """The group's offsets at the end of `topics`: what a worker that committed past
    records it never handled leaves (the gate's input for those trials consumed unseen)."""
    consumer = KafkaConsumer(
        **kafka_client_kwargs(settings), group_id=group, enable_auto_commit=False
    )
    try:
        tps = [
            TopicPartition(topic_name(t, settings), p)
            for t in topics
            for p in sorted(consumer.partitions_for_topic(topic_name(t, settings)) or ())
        ]
        consumer.commit(
            {tp: OffsetAndMetadata(o, "", -1) for tp, o in consumer.end_offsets(tps).items()}
        )
    finally:
        consumer.close()


def changelog_state(settings: Settings) -> dict[str, Any]:
    (changelog,) = PROCESSORS["aggregate"].changelogs
    state: dict[str, Any] = {}
    for key, value, _ in read_topic(settings, changelog):  # type: ignore[arg-type]
        state[json.loads(key or b'""')] = value
    return state


def write_wrong_count(settings: Settings) -> tuple[str, str, int]:
    """A 1h window bucket of the aggregate's table rewritten with 2 passes too many (and
    the next sequence number, as a real write would carry): (scenario, size, start)."""
    state = changelog_state(settings)
    key, bucket = next(
        (k, v)
        for k, v in sorted(state.items())
        if k.startswith("b|") and "|w|1h|" in k and isinstance(v, dict)
    )
    wrong = {**bucket, "passed": bucket["passed"] + 2, "seq": bucket["seq"] + 1}
    (changelog,) = PROCESSORS["aggregate"].changelogs
    producer = KafkaProducer(**kafka_client_kwargs(settings), acks="all")
    try:
        producer.send(
            topic_name(changelog, settings),
            key=json.dumps(key).encode(),
            value=json.dumps(wrong).encode(),
            partition=bucket["partition"],
        ).get(30)
    finally:
        producer.close()
    return bucket["scenario_id"], "1h", bucket["window_start"]


def supervisorctl(conf: Path, *args: str) -> None:
    subprocess.run(
        [str(BIN / "supervisorctl"), "-c", str(conf), *args],
        check=True,
        capture_output=True,
        timeout=120,
    )


def sent(traffic: list[Path]) -> dict[str, dict[str, Any]]:
    """trial_id -> its ConversationFinished, as the test sent it."""
    out = {}
    for path in traffic:
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("type") == "conversation_finished":
                out[event["trial_id"]] = event
    return out


def figures_from_what_was_sent(
    conversations: dict[str, dict[str, Any]], outcomes: dict[str, str]
) -> tuple[Counter, Counter]:
    """(scenario, run, outcome) and (scenario, 1h window start, outcome) counts, made here
    from the traffic and the expected outcomes."""
    runs: Counter[tuple[str, str, str]] = Counter()
    hours: Counter[tuple[str, int, str]] = Counter()
    for trial_id, event in conversations.items():
        outcome = outcomes[trial_id]
        at = datetime.fromisoformat(event["occurred_at"].replace("Z", "+00:00")).timestamp()
        runs[(event["scenario_id"], event["run_id"], outcome)] += 1
        hours[(event["scenario_id"], int(at // 3600) * 3600, outcome)] += 1
    return runs, hours


def test_audit_finds_each_loss_and_repair_leaves_it_clean(
    settings: Settings, tmp_path: Path
) -> None:
    with running_pipeline(settings, tmp_path, WORKERS, PASSK_JUDGE_WAIT_S="10") as p:
        # where `make up` writes it: where `passk aggregate recount` finds its supervisord
        conf = settings.data_dir / "run" / "supervisord.conf"
        supervise_config(
            conf, tmp_path / "supervised", p.env, "--metrics-base", "0", "--only", "aggregate"
        )
        with supervisord(conf, p.env):
            wait_for(
                lambda: settled(settings, ["aggregate"]),
                timeout=120,
                interval=1.0,
                what="the supervised aggregate settled",
            )
            traffic, expected = p.publish_and_generate(
                SCENARIOS, tmp_path / "first", "audit-run", trials=30, seed=5, pass_prob=0.8
            )
            assert p.passk("replay", str(traffic)).returncode == 0
            outcomes = {t["trial_id"]: t["expected_outcome"] for t in expected["trials"]}
            assert (
                p.passk(
                    "wait",
                    "--run-id",
                    "audit-run",
                    "--trials",
                    str(len(outcomes)),
                    "--timeout",
                    "180",
                ).returncode
                == 0
            )
            wait_for(
                lambda: settled(settings, WORKERS + ["aggregate"]),
                timeout=120,
                interval=1.0,
                what="every worker settled",
            )
            clean = audit(p, expect=0)
            assert clean["clean"] and clean["trials"] == len(outcomes)
            assert set(clean["stages"].values()) == {len(outcomes)}

            # 1. a gate result that never comes: the gate committed past a run's trials
            p.kill("gate")
            wait_for(
                lambda: group_members(settings, f"{settings.topic_prefix}gate") == 0,
                timeout=60,
                interval=1.0,
                what="the killed gate out of its group",
            )
            late, late_expected = p.publish_and_generate(
                SCENARIOS, tmp_path / "late", "audit-late", trials=3, seed=9, pass_prob=1.0
            )
            assert p.passk("replay", str(late)).returncode == 0
            commit_past_everything(
                settings,
                f"{settings.topic_prefix}gate",
                Topic.CONVERSATION_FINISHED,
                Topic.SESSION_PERSISTED,
            )
            p.start_worker("gate")
            late_ids = {t["trial_id"] for t in late_expected["trials"]}
            outcomes |= {t["trial_id"]: t["expected_outcome"] for t in late_expected["trials"]}

            # 2. a projection row deleted
            gone = sorted(t["trial_id"] for t in expected["trials"])[0]
            db = sqlite3.connect(settings.database_url.removeprefix("sqlite:///"))
            with db:
                assert db.execute("DELETE FROM trials WHERE trial_id = ?", (gone,)).rowcount == 1
            db.close()

            # 3. a count written wrong into the aggregate's changelog before a restart
            supervisorctl(conf, "stop", "aggregate")
            scenario, size, start = write_wrong_count(settings)
            supervisorctl(conf, "start", "aggregate")
            wait_for(
                lambda: settled(settings, WORKERS + ["aggregate"]),
                timeout=180,
                interval=1.0,
                what="every worker settled after the restarts",
            )

            def found() -> dict[str, Any] | None:
                report = audit(p)
                stuck = {u["trial_id"] for u in report["unaccounted"] if u["stopped_at"] == "gate"}
                return report if stuck == late_ids else None

            report = wait_for(
                found, timeout=120, interval=3.0, what="the trials the gate never saw reported"
            )
            assert not report["clean"]
            by_stage = Counter(u["stopped_at"] for u in report["unaccounted"])
            assert by_stage == {"gate": len(late_ids), "projection": 1, "aggregate_window": 1}, (
                json.dumps(report["scopes"])
            )
            assert [
                u["trial_id"] for u in report["unaccounted"] if u["stopped_at"] == "projection"
            ] == [gone]
            (wrong,) = [u for u in report["unaccounted"] if u["stopped_at"] == "aggregate_window"]
            assert wrong["trial_id"] is None and wrong["scenario_id"] == scenario
            assert any(
                s["scenario_id"] == scenario
                and s["scope"] == size
                and s["window_start"] == start
                and s["counted"]["passed"] == s["expected"]["passed"] + 2
                for s in report["scopes"]
            ), report["scopes"]

            repaired = audit(p, "--repair", "--repair-wait", "240", expect=0)
            assert repaired["clean"], repaired
            assert repaired["repaired"]["regraded"] == len(late_ids)
            assert repaired["repaired"]["reprojected"] == 1
            assert repaired["repaired"]["recounted_scopes"] >= 1

            # every figure equals what was sent
            conversations = sent([traffic, late])
            runs, hours = figures_from_what_was_sent(conversations, outcomes)
            for run_id in ("audit-run", "audit-late"):
                result = p.passk("report", "--run-id", run_id, "--json")
                for row in json.loads(result.stdout)["scenarios"]:
                    want = (
                        runs[(row["scenario_id"], run_id, "passed")],
                        runs[(row["scenario_id"], run_id, "failed")],
                        runs[(row["scenario_id"], run_id, "error")],
                    )
                    assert (row["passed"], row["failed"], row["errors"]) == want, (run_id, row)

            def windows_right() -> bool:
                rows = json.loads(p.passk("windows", "--json").stdout)["windows"]
                hourly = [w for w in rows if w["window"] == "1h"]
                for w in hourly:
                    begin = int(
                        datetime.fromisoformat(w["window_start"].replace("Z", "+00:00")).timestamp()
                    )
                    want = tuple(
                        hours[(w["scenario_id"], begin, o)] for o in ("passed", "failed", "error")
                    )
                    if (w["passed"], w["failed"], w["errors"]) != want:
                        return False
                return bool(hourly)

            wait_for(
                windows_right,
                timeout=60,
                interval=2.0,
                what="windows --json equal to the counts made from what was sent",
            )
