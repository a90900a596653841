"""The aggregate worker's CPU per verdict, alone: the working figure behind
`aggregate_overhead.py` (whose wall-time ratio a shared machine's load disturbs more than
a worker's own CPU time).

Not a test: it prints. On a broker (default: KAFKA_BOOTSTRAP_SERVERS) and a topic prefix
of its own, it starts one `passk worker aggregate`, waits until it is up, then writes a
file of real trial verdicts to `trial-verdicts` (all at once, or at `--rate` verdicts/s as
a pipeline hands them on) and waits until the aggregate has consumed and committed them
all. Its CPU from just before the first verdict to then, divided by the verdicts, is the
figure. It then reads `scenario-reliability` and checks that the last figure of every
(scenario, run) and (scenario, window) equals a count made here from the verdicts
themselves (each trial once, its highest attempt), so a faster aggregate that counts
wrong does not pass for a faster one.

    .venv/bin/python bench/aggregate_cpu.py --capture var/bench/verdicts.jsonl [--trials 10000]
    .venv/bin/python bench/aggregate_cpu.py var/bench/verdicts.jsonl [--rate 100]
        [--profile var/bench/profiles/aggregate.txt]

`--capture` runs gate, verdict, judge and sink on generated traffic (as
`aggregate_overhead.py` does) and writes their trial verdicts, one JSON per line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

from bench.launch import cpu_seconds, spawn, stop, wait_until  # noqa: E402
from services.cli.status import processor_status  # noqa: E402
from services.contract.settings import Settings  # noqa: E402
from services.contract.topics import Topic, topic_name  # noqa: E402
from services.kafka.admin import create_topics  # noqa: E402
from services.kafka.kafka_client import kafka_client_kwargs  # noqa: E402

WINDOWS = {"1h": 3600, "1d": 86400}  # PASSK_WINDOWS as this bench sets it


def read_all(settings: Settings, topic: Topic) -> list[tuple[bytes | None, bytes]]:
    name = topic_name(topic, settings)
    consumer = KafkaConsumer(**kafka_client_kwargs(settings), enable_auto_commit=False)
    try:
        parts = [TopicPartition(name, p) for p in consumer.partitions_for_topic(name) or ()]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        end = consumer.end_offsets(parts)
        out: list[tuple[bytes | None, bytes]] = []
        while any(consumer.position(tp) < end[tp] for tp in parts):
            for records in consumer.poll(timeout_ms=1000).values():
                out.extend((r.key, r.value) for r in records)
        return out
    finally:
        consumer.close()


def capture(path: Path, trials: int, workdir: Path) -> None:
    from bench import aggregate_overhead as overhead

    traffic = overhead.generate(trials, workdir)
    prefix = f"passk.bench{uuid.uuid4().hex[:8]}."
    overhead.one_run(traffic, trials, overhead.BASE, workdir, prefix=prefix)
    settings = Settings(PASSK_TOPIC_PREFIX=prefix)  # type: ignore[call-arg]
    records = read_all(settings, Topic.TRIAL_VERDICTS)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(value.decode() + "\n" for _, value in records))
    print(f"captured {len(records)} trial verdicts to {path}")


def reference(verdicts: list[dict]) -> dict[tuple, tuple[int, int, int]]:  # type: ignore[type-arg]
    """(scenario, run, window, window start) -> (passed, failed, errors), counted here."""
    final: dict[str, dict] = {}  # type: ignore[type-arg]
    for v in verdicts:
        if v["trial_id"] not in final or v["attempt"] > final[v["trial_id"]]["attempt"]:
            final[v["trial_id"]] = v
    counts: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])  # type: ignore[type-arg]
    index = {"passed": 0, "failed": 1, "error": 2}
    for v in final.values():
        scopes: list[tuple] = [(v["scenario_id"], v["run_id"], None, None)]  # type: ignore[type-arg]
        if v.get("finished_at"):
            at = int(datetime.fromisoformat(v["finished_at"]).timestamp())
            scopes += [
                (v["scenario_id"], None, label, at - at % size) for label, size in WINDOWS.items()
            ]
        for scope in scopes:
            counts[scope][index[v["outcome"]]] += 1
    return {k: (c[0], c[1], c[2]) for k, c in counts.items()}


def published(settings: Settings) -> dict[tuple, tuple[int, int, int]]:  # type: ignore[type-arg]
    """The last figure of each scope on scenario-reliability (one partition per scenario,
    so the last record read of a scope is its last published)."""
    last: dict[tuple, tuple[int, int, int]] = {}  # type: ignore[type-arg]
    for _, value in read_all(settings, Topic.SCENARIO_RELIABILITY):
        r = json.loads(value)
        start = (
            int(datetime.fromisoformat(r["window_start"]).timestamp())
            if r.get("window_start")
            else None
        )
        last[(r["scenario_id"], r.get("run_id"), r.get("window"), start)] = (
            r["passed"],
            r["failed"],
            r["errors"],
        )
    return last


def drain(lines: list[bytes], rate: float | None, workdir: Path, profile: Path | None) -> None:
    prefix = f"passk.bench{uuid.uuid4().hex[:8]}."
    settings = Settings(  # type: ignore[call-arg]
        PASSK_TOPIC_PREFIX=prefix,
        PASSK_DATA_DIR=str(workdir / prefix),
        PASSK_WINDOWS=",".join(WINDOWS),
    )
    create_topics(settings)
    env = dict(
        os.environ,
        KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers,
        PASSK_TOPIC_PREFIX=prefix,
        PASSK_DATA_DIR=str(settings.data_dir),
        PASSK_WINDOWS=settings.windows,
        PYTHONUNBUFFERED="1",
    )
    worker = spawn(env, "worker", "aggregate", log=workdir / f"{prefix}aggregate.log")
    spy = None
    try:
        wait_until(
            lambda: all(s.ready for s in processor_status(["aggregate"], settings)),
            180,
            "the aggregate up",
        )
        if profile is not None:
            profile.parent.mkdir(parents=True, exist_ok=True)
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("py-spy")),
                    "record",
                    "-p",
                    str(worker.pid),
                    "-r",
                    "50",
                    "-f",
                    "raw",
                    "--nonblocking",
                    "-o",
                    str(profile),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        producer = KafkaProducer(**kafka_client_kwargs(settings), acks="all", linger_ms=5)
        name = topic_name(Topic.TRIAL_VERDICTS, settings)
        cpu0, start = cpu_seconds(worker.pid), time.monotonic()
        for i, line in enumerate(lines):
            producer.send(name, key=json.loads(line)["trial_id"].encode(), value=line)
            if rate:
                ahead = start + (i + 1) / rate - time.monotonic()
                if ahead > 0:
                    producer.flush()
                    time.sleep(ahead)
        producer.flush()
        producer.close()
        wait_until(
            lambda: all(s.settled for s in processor_status(["aggregate"], settings)),
            3600,
            f"{len(lines)} verdicts counted",
            interval=0.2,
        )
        elapsed, cpu = time.monotonic() - start, cpu_seconds(worker.pid) - cpu0
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        load = os.getloadavg()[0]
        print(
            f"{len(lines)} verdicts{f' at {rate:g}/s' if rate else ' at once'}: "
            f"{elapsed:.1f} s, aggregate CPU {cpu:.2f} s = "
            f"{1000 * cpu / len(lines):.3f} ms per verdict (load average {load:.1f})"
        )
        want = reference([json.loads(line) for line in lines])
        got = published(settings)
        wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
        print(
            f"figures: {len(want)} scopes, "
            + (
                "all equal the reference count"
                if not wrong and len(got) == len(want)
                else f"{len(wrong)} differ, {len(got)} published: {list(wrong.items())[:5]}"
            )
        )
        if wrong or len(got) != len(want):
            raise SystemExit(1)
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
        stop([worker])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("verdicts", type=Path, nargs="?")
    parser.add_argument("--capture", type=Path, help="write the pipeline's verdicts here")
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--rate", type=float, help="verdicts per second (default: all at once)")
    parser.add_argument("--profile", type=Path, help="py-spy raw profile of the aggregate")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="passk-bench-") as tmp:
        if args.capture:
            capture(args.capture, args.trials, Path(tmp))
        elif args.verdicts:
            lines = [line.encode() for line in args.verdicts.read_text().splitlines() if line]
            drain(lines, args.rate, Path(tmp), args.profile)
        else:
            parser.error("give a verdicts file, or --capture FILE")


if __name__ == "__main__":
    main()
