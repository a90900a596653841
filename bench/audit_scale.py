"""What `passk audit` costs as the log grows: its time against a plain read of the same
topics (the baseline, measured in the same run), and its peak memory at each size.

Not a test: it prints. For each size N it writes N trials' worth of records straight to a
topic prefix of its own (a ConversationFinished, a gate result, a judge verdict and a
trial verdict per trial), the projection's rows, and the aggregate's table as a recount
makes it from those verdicts (so the audit comes out clean, having done all its work),
then times `passk audit --json` and a group-less read of the same four topics, each a
process of its own, and reads each one's peak RSS.

    .venv/bin/python bench/audit_scale.py [--sizes 5000,20000,80000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kafka import KafkaProducer  # noqa: E402

from schemas.events import (  # noqa: E402
    ConversationFinished,
    GateResult,
    JudgeVerdict,
    Message,
    TrialVerdict,
)
from schemas.scenario import Scenario  # noqa: E402
from services.aggregate import domain  # noqa: E402
from services.aggregate.recount import corrections, recount, recounted_buckets  # noqa: E402
from services.aggregate.table import scenario_partitioner, write_corrections  # noqa: E402
from services.contract.codec import encode  # noqa: E402
from services.contract.scenario_records import encode_scenario  # noqa: E402
from services.contract.settings import Settings  # noqa: E402
from services.contract.topics import Topic, topic_name  # noqa: E402
from services.grading.windows import parse_windows  # noqa: E402
from services.kafka.admin import create_topics  # noqa: E402
from services.kafka.kafka_client import kafka_client_kwargs  # noqa: E402
from services.storage.store import Store  # noqa: E402

SCENARIOS = [f"bench-{i}" for i in range(5)]

SCAN = """
import sys
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.scan import scan
s = Settings()
n = 0
def count(records):
    global n
    n += len(records)
for t in (Topic.CONVERSATION_FINISHED, Topic.GATE_RESULTS, Topic.JUDGE_VERDICTS,
          Topic.TRIAL_VERDICTS):
    scan(s, topic_name(t, s), count)
print(n)
"""


def write_log(settings: Settings, trials: int) -> None:
    now = datetime.now(UTC)
    producer = KafkaProducer(
        **kafka_client_kwargs(settings), acks=1, linger_ms=20, batch_size=256_000
    )
    scenario_topic = topic_name(Topic.SCENARIOS, settings)
    for sid in SCENARIOS:
        key, value = encode_scenario(
            Scenario.model_validate(
                {
                    "id": sid,
                    "expected_exit": "product_closed",
                    "judges": [
                        {"id": "polite", "kind": "regex", "pattern": "thanks", "must_match": False}
                    ],
                }
            )
        )
        producer.send(scenario_topic, key=key, value=value)
    producer.flush()
    verdicts = []
    for i in range(trials):
        sid = SCENARIOS[i % len(SCENARIOS)]
        at = now - timedelta(seconds=(trials - i) * 0.5)
        ids = {
            "trial_id": f"t{i:08d}",
            "run_id": f"run-{i // 1000}",
            "scenario_id": sid,
            "session_id": f"s{i:08d}",
        }
        conv = ConversationFinished(
            event_id=f"c{i}",
            occurred_at=at,
            exit_reason="product_closed",
            transcript=[
                Message(role="user", content="hello"),
                Message(role="assistant", content="done"),
            ],
            **ids,
        )
        ref = {**ids, "scenario_version": "v1"}
        gate = GateResult(event_id=f"g{i}", gate="exit", passed=True, finished_at=at, **ref)
        judge = JudgeVerdict(
            event_id=f"j{i}",
            judge_id="polite",
            judge_kind="regex",
            result="passed",
            reason="ok",
            **ref,
        )
        verdict = TrialVerdict(
            event_id=f"v{i}", k=3, outcome="passed" if i % 7 else "failed", finished_at=at, **ref
        )
        verdicts.append(verdict)
        key = ids["session_id"].encode()
        producer.send(
            topic_name(Topic.CONVERSATION_FINISHED, settings), key=key, value=encode(conv)
        )
        producer.send(
            topic_name(Topic.GATE_RESULTS, settings),
            key=ids["trial_id"].encode(),
            value=encode(gate),
        )
        producer.send(
            topic_name(Topic.JUDGE_VERDICTS, settings),
            key=ids["trial_id"].encode(),
            value=encode(judge),
        )
        producer.send(
            topic_name(Topic.TRIAL_VERDICTS, settings),
            key=ids["trial_id"].encode(),
            value=encode(verdict),
        )
    producer.flush()
    producer.close()
    store = Store(settings.database_url)
    store.create_schema()
    for start in range(0, len(verdicts), 2000):
        store.apply_many(verdicts[start : start + 2000])
    config = domain.Config(
        sizes=parse_windows(settings.windows), retention_s=settings.dedup_retention_s
    )
    partition_of = scenario_partitioner(settings)
    table = recount(((v, time.time()) for v in verdicts), config, partition_of)
    writes = corrections({}, table, None, partition_of)
    write_corrections(
        settings,
        writes,
        recounted_buckets(writes),
        lambda _: (settings.alert_min_pass_hat_k, settings.alert_min_trials),
    )


# Runs a module or a snippet, then writes its own peak RSS (KiB) on stderr's last line.
# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across fork and exec, so a
# child started from this process (which holds every verdict it wrote) reported *our* peak
# as its own, and that grew with the log (the 134 -> 216 MiB of an earlier run).
PEAK = """
import runpy, sys
what = sys.argv.pop(1)
try:
    if what == "-c":
        exec(sys.argv.pop(1))
    else:
        runpy.run_module(what, run_name="__main__")
finally:
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
    sys.stderr.write("\\npeak %s\\n" % hwm)
"""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(seconds, peak RSS in MiB, stdout) of one process run to its end."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{argv[:2]} failed ({done.returncode}): {done.stderr[-2000:]}")
    peak_kib = int(done.stderr.strip().splitlines()[-1].split()[1])
    return took, peak_kib / 1024, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5000,20000,80000")
    args = parser.parse_args()
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="passk-bench-audit-") as work:
            values = {
                "PASSK_TOPIC_PREFIX": f"bench.{uuid.uuid4().hex[:8]}.",
                "PASSK_DATABASE_URL": f"sqlite:///{work}/passk.db",
                "PASSK_DATA_DIR": f"{work}/data",
            }
            settings = Settings(**values)  # type: ignore[arg-type]
            create_topics(settings)
            write_log(settings, size)
            env = {**os.environ, **values, "PYTHONPATH": str(ROOT)}
            scan_s, scan_mb, read = timed(["-c", SCAN], env)
            audit_s, audit_mb, out = timed(["services.cli", "audit", "--json", "--grace", "0"], env)
            report = json.loads(out)
            assert report["clean"] and report["trials"] == size, report
            rows.append((size, int(read), scan_s, audit_s, audit_mb))
    print(
        f"{'trials':>8} {'records':>9} {'read s':>8} {'audit s':>8} {'audit/read':>10} "
        f"{'trials/s':>9} {'audit peak MiB':>15}"
    )
    for size, records, scan_s, audit_s, audit_mb in rows:
        print(
            f"{size:>8} {records:>9} {scan_s:>8.1f} {audit_s:>8.1f} {audit_s / scan_s:>9.2f}x "
            f"{size / audit_s:>9.0f} {audit_mb:>15.0f}"
        )


if __name__ == "__main__":
    main()
