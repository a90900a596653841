"""Trials/s one worker of each processor sustains, and the bytes a trial leaves in Kafka.

Not a test: it prints. On a broker (default: KAFKA_BOOTSTRAP_SERVERS), on a topic prefix
of its own, it replays N generated trials with every processor stopped, then starts ONE
worker per processor stage by stage (gate and judge on the backlog; then verdict; then
sink) and times how fast each group's lag drains, polling the broker's committed offsets:

    rate = records consumed between the first poll that shows progress and the first
           poll at lag 0, divided by that time; trials/s = rate / input records per trial

The judges answer through the offline stand-in with no added latency, so the judge figure
is its pipeline cost, not a model's (see bench/judge_throughput.py for that). It also
reads the size of every passk topic on the broker's disk (describe_log_dirs) and divides
by the trials, for docs/scaling.md. Run on a quiet machine for clean figures.

    .venv/bin/python bench/worker_throughput.py [--trials 4000]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kafka import KafkaAdminClient  # noqa: E402

from bench.launch import cpu_seconds, free_port, spawn, stop  # noqa: E402
from services.cli.status import processor_status  # noqa: E402
from services.contract.processors import TOPIC_SPECS  # noqa: E402
from services.contract.settings import Settings  # noqa: E402
from services.contract.topics import topic_name  # noqa: E402
from services.kafka.admin import create_topics  # noqa: E402
from services.kafka.kafka_client import kafka_client_kwargs  # noqa: E402

STAGES = (("gate", "judge"), ("verdict",), ("sink",))


def _run(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )


def _drain(
    settings: Settings, names: tuple[str, ...], pids: dict[str, int], timeout: float
) -> dict[str, tuple[float, float]]:
    """(records/s, records per CPU second) per processor, from its lag as the broker
    reports it and the CPU time its worker used meanwhile."""
    first: dict[str, tuple[float, int, float]] = {}
    start_lag: dict[str, int] = {}
    done: dict[str, tuple[float, float]] = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(names):
        if time.monotonic() > deadline:
            raise SystemExit(f"not drained within {timeout:.0f} s: {names}")
        now = time.monotonic()
        for s in processor_status(list(names), settings):
            if s.processor in done or s.lag is None:
                continue
            start_lag.setdefault(s.processor, s.lag)
            if s.processor not in first and s.lag < start_lag[s.processor]:
                first[s.processor] = (now, s.lag, cpu_seconds(pids[s.processor]))
            if s.processor in first and s.lag == 0:
                t0, lag0, cpu0 = first[s.processor]
                cpu = cpu_seconds(pids[s.processor]) - cpu0
                done[s.processor] = (lag0 / max(now - t0, 1e-6), lag0 / max(cpu, 1e-6))
        time.sleep(0.25)
    return done


def _topic_bytes(settings: Settings) -> dict[str, int]:
    names = {topic_name(spec.topic, settings) for spec in TOPIC_SPECS}
    admin = KafkaAdminClient(**kafka_client_kwargs(settings))
    try:
        dirs = admin.describe_log_dirs()
    finally:
        admin.close()
    sizes: dict[str, int] = {}
    for broker in dirs:
        for log_dir in broker["log_dirs"]:
            for topic in log_dir["topics"]:
                if topic["name"] in names:
                    sizes[topic["name"]] = sizes.get(topic["name"], 0) + sum(
                        p["partition_size"] for p in topic["partitions"]
                    )
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=4000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="passk-bench-"))
    settings = Settings(  # type: ignore[call-arg]
        PASSK_TOPIC_PREFIX=f"passk.bench{uuid.uuid4().hex[:8]}.",
        PASSK_DATABASE_URL=f"sqlite:///{tmp / 'passk.db'}",
        PASSK_DATA_DIR=str(tmp / "data"),
        PASSK_SESSION_WAIT_S=600,
        PASSK_JUDGE_WAIT_S=600,
    )
    create_topics(settings)
    port = free_port()
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        "PASSK_TOPIC_PREFIX": settings.topic_prefix,
        "PASSK_DATABASE_URL": settings.database_url,
        "PASSK_DATA_DIR": str(settings.data_dir),
        "PASSK_SESSION_WAIT_S": "600",
        "PASSK_JUDGE_WAIT_S": "600",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "OPENAI_API_KEY": "stand-in",
        "PASSK_JUDGE_MODEL": "passk-standin",
        "PASSK_JUDGE_CACHE": "0",
    }
    procs = [spawn(env, "judge-standin", "--host", "127.0.0.1", "--port", str(port))]
    try:
        scenarios = ROOT / "examples" / "scenarios"
        _run(env, "scenarios", "publish", str(scenarios))
        n_scenarios = len(list(scenarios.glob("*.y*ml")))
        traffic, expected = tmp / "traffic.jsonl", tmp / "expected.json"
        _run(
            env,
            "generate",
            "--scenarios",
            str(scenarios),
            "--run-id",
            "bench",
            "--out",
            str(traffic),
            "--expected",
            str(expected),
            "--seed",
            "1",
            "--trials",
            str(max(1, args.trials // n_scenarios)),
        )
        trials = len(json.loads(expected.read_text())["trials"])
        _run(env, "replay", str(traffic))
        inputs_per_trial: dict[str, float] = {}
        rates: dict[str, tuple[float, float]] = {}
        for stage in STAGES:
            before = {s.processor: s.lag or 0 for s in processor_status(list(stage), settings)}
            pids = {}
            for name in stage:
                procs.append(spawn(env, "worker", name, log=tmp / f"{name}.log"))
                pids[name] = procs[-1].pid
            rates.update(_drain(settings, stage, pids, timeout=3600))
            for name in stage:
                inputs_per_trial[name] = before[name] / trials
        sizes = _topic_bytes(settings)
    finally:
        stop(procs)
    load = os.getloadavg()
    print(
        f"{trials} trials, one worker per processor, broker {settings.kafka_bootstrap_servers}"
        f", {os.cpu_count()} cores, load average {load[0]:.1f}"
    )
    print(
        f"{'processor':10} {'input records/trial':>20} {'records/s':>10} {'trials/s':>9} "
        f"{'trials/CPU-s':>13}"
    )
    for name, (rate, per_cpu) in rates.items():
        per = inputs_per_trial[name]
        print(
            f"{name:10} {per:20.2f} {rate:10.0f} {rate / per if per else 0:9.0f} "
            f"{per_cpu / per if per else 0:13.0f}"
        )
    total = sum(sizes.values())
    print(f"\nbytes on the broker's disk per trial (one replica): {total / trials:.0f}")
    for name, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"  {name.removeprefix(settings.topic_prefix):40} {size / trials:8.0f}")


if __name__ == "__main__":
    main()
