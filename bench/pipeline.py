"""The whole pipeline against its ceiling: does the cost of a trial stay flat as the log grows?

Not a test: it prints a table and writes var/bench/<date>.json (not committed: the
latest figures, with the command that made each, are in bench/README.md). In one run, on the same
generated traffic (bench/scenarios: deterministic regex judges, ~3 KB transcripts, no
missing sessions so no trial waits on a deadline), at each scale:

- raw:        the same events produced to and consumed back from the same broker with
              kafka-python (the replay's own producer), nothing else: the ceiling;
- in-process: one Python loop over the same JSONL calling the same domain functions
              (gate join, both gates, the deterministic judges, the verdict, the SQL store):
              what a user would script instead of running the pipeline;
- pipeline:   `passk worker` processes (the set given by --workers) on fresh topics, the
              replay sent as fast as it goes, timed until every trial is in the projection
              that `passk report` reads; peak RSS (VmHWM) of every worker and its RSS at
              the end (VmRSS), and the largest scale's peak RSS over the one before.

Then, on fresh topics: traffic offered at a fixed rate (default 200 trials/s for 60 s) and
the p50/p99 time from a trial's conversation-finished record to its verdict record (both
broker timestamps); and `passk rebuild` of the largest run's projection against reading
the same four topics raw.

    .venv/bin/python bench/pipeline.py [--scales 2000,10000,50000]
        [--workers gate,verdict,judge,sink] [--compare-workers gate,verdict,judge,sink,aggregate]
        [--rate 200 --seconds 60] [--no-latency] [--no-rebuild] [--label before]
        [--profile gate,verdict,judge,sink]

PASSK_BENCH_SCALE=0.1 multiplies every trial count and the latency run's duration (for
development). KAFKA_BOOTSTRAP_SERVERS picks the broker (default 127.0.0.1:9092).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kafka import KafkaConsumer, TopicPartition  # noqa: E402

from bench.launch import (  # noqa: E402
    cpu_seconds,
    peak_rss_mb,
    profilers,
    spawn,
    stop,
    stop_profilers,
    wait_until,
)
from services.cli.status import processor_status  # noqa: E402
from services.contract.settings import Settings  # noqa: E402
from services.contract.topics import Topic, topic_name  # noqa: E402

SCENARIOS = ROOT / "bench" / "scenarios"
RESULTS = ROOT / "var" / "bench"
PROFILES = RESULTS / "profiles"
DEFAULT_WORKERS = "gate,verdict,judge,sink"
# No missing sessions: a trial that waits out PASSK_SESSION_WAIT_S measures the timeout.
QUIRKS = ["session_missing=0"]


# --------------------------------------------------------------------------- helpers


def scaled(n: int) -> int:
    return max(int(n * float(os.environ.get("PASSK_BENCH_SCALE", "1"))), 8)


def env_for(prefix: str, db: Path, data: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PASSK_TOPIC_PREFIX=prefix,
        PASSK_DATABASE_URL=f"sqlite:///{db}",
        PASSK_DATA_DIR=str(data),
        PASSK_SESSION_WAIT_S="30",
        PASSK_JUDGE_WAIT_S="30",
        PASSK_METRICS_PORT="0",
        PYTHONUNBUFFERED="1",
    )
    return env


def settings_for(env: dict[str, str]) -> Settings:
    return Settings(**{k: v for k, v in env.items() if k.startswith(("PASSK_", "KAFKA_"))})


def passk(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=env,
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=600,
    )


def generate(trials: int, run_id: str, out: Path) -> Path:
    per_scenario = max(trials // len(list(SCENARIOS.glob("*.yaml"))), 3)
    path = out / f"{run_id}.jsonl"
    args = [
        "generate",
        "--scenarios",
        str(SCENARIOS),
        "--run-id",
        run_id,
        "--out",
        str(path),
        "--expected",
        str(out / f"{run_id}.expected.json"),
        "--trials",
        str(per_scenario),
        "--seed",
        "8",
        "--start",
        "2026-01-01T00:00:00+00:00",
    ]
    for quirk in QUIRKS:
        args += ["--quirk-rate", quirk]
    passk(dict(os.environ), *args)
    return path


def trial_count(path: Path) -> int:
    return len(json.loads(path.with_suffix("").with_suffix(".expected.json").read_text())["trials"])


def stored_trials(db: Path, run_id: str) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(
                conn.execute("SELECT count(*) FROM trials WHERE run_id = ?", (run_id,)).fetchone()[
                    0
                ]
            )
    except sqlite3.OperationalError:  # no table yet, or a writer holds the lock
        return 0


def read_all(settings: Settings, topics: list[Topic]) -> tuple[int, float]:
    """Every record of the topics, read raw with kafka-python: (records, seconds)."""
    consumer = KafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        enable_auto_commit=False,
        max_poll_records=1000,
    )
    try:
        started = time.perf_counter()
        tps = [
            TopicPartition(topic_name(t, settings), p)
            for t in topics
            for p in consumer.partitions_for_topic(topic_name(t, settings)) or ()
        ]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        remaining = {tp for tp in tps if end[tp] > 0}
        count = 0
        while remaining:
            for _tp, records in consumer.poll(timeout_ms=1000).items():
                count += len(records)
            remaining = {tp for tp in remaining if consumer.position(tp) < end[tp]}
        return count, time.perf_counter() - started
    finally:
        consumer.close()


def records_by_trial(
    settings: Settings, topic: Topic, field_name: str = "trial_id", last: bool = False
) -> dict[str, float]:
    """`field_name` (trial_id) -> broker timestamp (s) of its first record on the topic
    (`last`: of its last one)."""
    consumer = KafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        enable_auto_commit=False,
        max_poll_records=1000,
    )
    out: dict[str, float] = {}
    try:
        name = topic_name(topic, settings)
        tps = [TopicPartition(name, p) for p in consumer.partitions_for_topic(name) or ()]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        remaining = {tp for tp in tps if end[tp] > 0}
        while remaining:
            for _tp, records in consumer.poll(timeout_ms=1000).items():
                for r in records:
                    key = json.loads(r.value)[field_name]
                    at = r.timestamp / 1000
                    out[key] = max(out.get(key, at), at) if last else out.get(key, at)
            remaining = {tp for tp in remaining if consumer.position(tp) < end[tp]}
        return out
    finally:
        consumer.close()


def quantiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {"n": len(values)}
    q = statistics.quantiles(values, n=100)
    return {"n": len(values), "p50_s": q[49], "p99_s": q[98], "max_s": max(values)}


# --------------------------------------------------------------------------- the three ways


def raw_round_trip(traffic: Path, trials: int, bootstrap: str, work: Path) -> float:
    """Produce every event of the file with the replay's producer and consume them back."""
    from services.kafka.producer import TrafficProducer
    from services.replay.replay import REPLAYED_TOPICS, replay_file

    env = env_for(f"passk.b{uuid.uuid4().hex[:8]}.", work / "raw.db", work / "raw")
    settings = settings_for(env)
    passk(env, "topics", "create")
    started = time.perf_counter()
    with TrafficProducer(settings) as producer:
        summary = replay_file(traffic, sender=producer, settings=settings)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=1000
    )
    try:
        tps = [
            TopicPartition(topic_name(t, settings), p)
            for t in REPLAYED_TOPICS
            for p in consumer.partitions_for_topic(topic_name(t, settings)) or ()
        ]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = 0
        while got < summary.total_valid:
            for records in consumer.poll(timeout_ms=1000).values():
                got += len(records)
    finally:
        consumer.close()
    return trials / (time.perf_counter() - started)


def in_process(traffic: Path, trials: int, work: Path) -> float:
    """One loop over the JSONL through the processors' domain functions, into SQLite."""
    from schemas.events import ConversationFinished, SessionPersisted
    from services.gate import domain as gate
    from services.gate.gates import gates_for
    from services.grading.calibration import CalibrationBook, GatingPolicy
    from services.grading.scenario_loader import load_scenarios
    from services.judge import domain as judge
    from services.replay.replay import parse_line, read_lines
    from services.storage.store import Store
    from services.verdict import domain as verdict

    scenarios = {s.id: s for s in load_scenarios(SCENARIOS).scenarios}
    store = Store(f"sqlite:///{work / 'inproc.db'}")
    store.create_schema()
    joins: dict[str, gate.JoinState] = {}
    states: dict[str, verdict.TrialState] = {}
    batch: list[Any] = []
    started = time.perf_counter()

    def to_verdict(event: Any) -> None:
        state = states.get(event.trial_id)
        if verdict.is_duplicate(state):
            return
        if event.__class__.__name__ == "GateResult":
            state = verdict.on_gate_result(state, event, time.time())
        else:
            state = verdict.on_judge_verdict(state, event, time.time())
        scenario = scenarios[state.scenario_id]
        if not verdict.missing_checks(state, scenario):
            # the bench's judges are deterministic (regex), which gate without calibration
            made = verdict.assemble(
                state,
                scenario,
                missing=[],
                waited_s=0.0,
                policy=GatingPolicy(),
                book=CalibrationBook(),
            )
            batch.append(made)
            state = verdict.emitted(state, made, time.time())
        states[event.trial_id] = state

    for lineno, raw in read_lines(traffic, max_line_bytes=1_000_000):
        line = parse_line(lineno, raw, max_bytes=1_000_000)
        if line is None or not hasattr(line, "topic"):
            continue
        if line.topic == Topic.CONVERSATION_FINISHED:
            conv = ConversationFinished.model_validate_json(line.value)
            scenario = scenarios[conv.scenario_id]
            batch.append(conv)
            for spec in scenario.judges:
                verdict_event = judge.deterministic_verdict(conv, scenario, spec)
                batch.append(verdict_event)
                to_verdict(verdict_event)
            key = conv.session_id
            decision = gate.on_conversation(
                joins.get(key), conv, time.time(), wait_for_session=scenario.has_state_gate
            )
        else:
            sess = SessionPersisted.model_validate_json(line.value)
            key = sess.session_id
            decision = gate.on_session(joins.get(key), sess, time.time())
        if decision.grade is not None:
            g = decision.grade
            sc = scenarios[g.conversation.scenario_id]
            for result in gates_for(g.conversation, g.session, sc, waited_s=g.waited_s):
                batch.append(result)
                to_verdict(result)
        if decision.note in gate.STATE_CHANGES:
            if decision.state is None:
                joins.pop(key, None)
            else:
                joins[key] = decision.state
        if len(batch) >= 500:
            store.apply_many(batch)
            batch = []
    store.apply_many(batch)
    seconds = time.perf_counter() - started
    stored = len(store.trials(_run_id_of(traffic)))
    store.close()
    if stored < trials:
        raise RuntimeError(f"in-process loop stored {stored} of {trials} trials")
    return trials / seconds


def _run_id_of(traffic: Path) -> str:
    return traffic.stem


@dataclass
class Workers:
    names: list[str]
    env: dict[str, str]
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self) -> None:
        settings = settings_for(self.env)
        for name in self.names:
            self.procs[name] = spawn(self.env, "worker", name, log=self.logs / f"{name}.log")
        wait_until(
            lambda: (
                all(p.poll() is None for p in self.procs.values())
                and all(s.ready for s in processor_status(self.names, settings))
            ),
            180,
            "every worker joined its group",
            interval=1.0,
        )

    def check_alive(self) -> None:
        dead = [n for n, p in self.procs.items() if p.poll() is not None]
        if dead:
            raise RuntimeError(f"worker(s) died: {dead}; see {self.logs}")

    def rss(self, field: str = "VmHWM") -> dict[str, float | None]:
        return {name: peak_rss_mb(p.pid, field) for name, p in self.procs.items()}

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(p.pid) for name, p in self.procs.items()}

    def stop(self) -> None:
        stop(self.procs.values())
        self.procs.clear()


def fresh_pipeline(
    workers: list[str], work: Path, tag: str
) -> tuple[Workers, dict[str, str], Path]:
    prefix = f"passk.b{uuid.uuid4().hex[:8]}."
    db = work / f"{tag}.db"
    data = work / f"{tag}-data"
    data.mkdir()
    logs = work / f"{tag}-logs"
    logs.mkdir()
    env = env_for(prefix, db, data)
    passk(env, "topics", "create")
    passk(env, "scenarios", "publish", str(SCENARIOS))
    w = Workers(workers, env, logs)
    w.start()
    return w, env, db


def pipeline(
    traffic: Path,
    trials: int,
    workers: list[str],
    work: Path,
    tag: str,
    timeout: float,
    profile: list[str] | None = None,
) -> dict[str, Any]:
    from services.kafka.producer import TrafficProducer
    from services.replay.replay import replay_file

    w, env, db = fresh_pipeline(workers, work, tag)
    run_id = _run_id_of(traffic)
    try:
        idle_cpu = w.cpu()  # start-up and group joining, not the trials
        spies = profilers(w.procs, profile or [], PROFILES / tag, gil=True)
        started = time.perf_counter()
        with TrafficProducer(settings_for(env)) as producer:
            replay_file(traffic, sender=producer, settings=settings_for(env))

        def done() -> bool:
            w.check_alive()
            return stored_trials(db, run_id) >= trials

        completed = trials
        try:
            if "sink" in workers:
                wait_until(done, timeout, f"{trials} trials in the projection", interval=0.5)
            else:  # without a sink, "done" is every worker's inputs consumed
                wait_until(
                    lambda: all(s.settled for s in processor_status(workers, settings_for(env))),
                    timeout,
                    "every worker settled",
                    interval=1.0,
                )
        except TimeoutError:  # reported as what got through in the time, and marked so
            completed = stored_trials(db, run_id)
        seconds = time.perf_counter() - started
        stop_profilers(spies)
        # CPU milliseconds per trial: what a busy shared machine disturbs least
        cpu_ms = {
            name: 1000 * (used - idle_cpu[name]) / max(completed, 1)
            for name, used in w.cpu().items()
        }
        # Python seldom gives freed memory back, so the peak (VmHWM) is what a backlog cost;
        # the resident memory now (VmRSS) shows whether it was given back.
        return {
            "trials_per_s": completed / seconds,
            "seconds": seconds,
            "peak_rss_mb": w.rss(),
            "rss_mb": w.rss("VmRSS"),
            "cpu_ms_per_trial": cpu_ms,
            "env": env,
            "db": str(db),
            "completed": completed,
        }
    finally:
        w.stop()


def latency(workers: list[str], work: Path, rate: float, seconds: float) -> dict[str, Any]:
    """Trials offered at `rate`/s for `seconds`; p50/p99 conversation-finished -> verdict."""
    from services.kafka.producer import TrafficProducer
    from services.replay.replay import replay_file

    trials = int(rate * seconds)
    run_id = f"bench-latency-{trials}"
    traffic = generate(trials, run_id, work)
    trials = trial_count(traffic)
    events = sum(1 for _ in traffic.open())
    w, env, db = fresh_pipeline(workers, work, "latency")
    settings = settings_for(env)
    try:
        idle_cpu = w.cpu()
        load_before = os.getloadavg()[0]
        with TrafficProducer(settings) as producer:
            replay_file(traffic, sender=producer, settings=settings, rate=rate * events / trials)
        try:
            wait_until(
                lambda: (w.check_alive(), stored_trials(db, run_id) >= trials)[1],
                max(120.0, seconds * 3),
                "every verdict",
            )
            complete = True
        except TimeoutError:
            complete = False
        cpu_ms = {
            name: round(1000 * (used - idle_cpu[name]) / trials, 2)
            for name, used in w.cpu().items()
        }
        load_after = os.getloadavg()[0]
        finished = records_by_trial(settings, Topic.CONVERSATION_FINISHED)
        verdicts = records_by_trial(settings, Topic.TRIAL_VERDICTS)
        # Where the time goes, stage by stage (all broker timestamps): when the session
        # arrived, when the last gate result and the last judge verdict were written.
        session_of = records_by_trial(settings, Topic.CONVERSATION_FINISHED, "session_id")
        sessions = records_by_trial(settings, Topic.SESSION_PERSISTED, "session_id")
        gates = records_by_trial(settings, Topic.GATE_RESULTS, last=True)
        judged = records_by_trial(settings, Topic.JUDGE_VERDICTS, last=True)
    finally:
        w.stop()
    lags = sorted(verdicts[t] - finished[t] for t in verdicts if t in finished)
    if len(lags) < 2:
        return {"offered_trials_per_s": rate, "seconds": seconds, "verdicts": len(lags)}
    q = statistics.quantiles(lags, n=100)
    # session_id -> conversation's time, to set each session against its conversation
    session_after = [sessions[s] - at for s, at in session_of.items() if s in sessions]
    both = [t for t in verdicts if t in gates and t in judged and t in finished]
    stages = {
        "session_after_conversation": quantiles(session_after),
        "conversation_to_last_gate_result": quantiles([gates[t] - finished[t] for t in both]),
        "conversation_to_last_judge_verdict": quantiles([judged[t] - finished[t] for t in both]),
        "last_input_to_verdict": quantiles([verdicts[t] - max(gates[t], judged[t]) for t in both]),
    }
    # p50 by tenth of the run (by conversation time): a backlog that grows shows as a
    # rising series, a fixed wait per stage as a flat one
    ordered = sorted((finished[t], verdicts[t] - finished[t]) for t in verdicts if t in finished)
    tenth = max(len(ordered) // 10, 1)
    by_tenth = [
        statistics.median(lag for _, lag in ordered[i : i + tenth])
        for i in range(0, tenth * 10, tenth)
        if ordered[i : i + tenth]
    ]
    return {
        "offered_trials_per_s": rate,
        "seconds": seconds,
        "trials": trials,
        "verdicts": len(lags),
        "complete": complete,
        "p50_s": q[49],
        "p99_s": q[98],
        "max_s": lags[-1],
        "stages": stages,
        "p50_by_tenth_s": by_tenth,
        "cpu_ms_per_trial": cpu_ms,
        "load": [load_before, load_after],
    }


def rebuild_vs_raw(env: dict[str, str], trials: int, work: Path) -> dict[str, Any]:
    from services.sink.rebuild import SOURCES, rebuild

    settings = settings_for(env)
    records, raw_s = read_all(settings, [t for t, _ in SOURCES])
    started = time.perf_counter()
    stats = rebuild(settings, f"sqlite:///{work / 'rebuilt.db'}")
    rebuild_s = time.perf_counter() - started
    return {
        "records": records,
        "stored": stats.stored,
        "raw_read_s": raw_s,
        "rebuild_s": rebuild_s,
        "raw_trials_per_s": trials / raw_s,
        "rebuild_trials_per_s": trials / rebuild_s,
        "rebuild_over_raw": raw_s / rebuild_s,
    }


# --------------------------------------------------------------------------- main


def machine() -> dict[str, Any]:
    mem = next(
        (
            ln.split()[1]
            for ln in Path("/proc/meminfo").read_text().splitlines()
            if ln.startswith("MemTotal")
        ),
        "0",
    )
    model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpus": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(int(mem) / 2**20, 1),
        "python": platform.python_version(),
        "system": platform.platform(),
        "load_at_start": os.getloadavg(),
    }


def print_table(result: dict[str, Any]) -> None:
    print(
        f"\npipeline benchmark ({result['label']}; workers {','.join(result['workers'])}; "
        f"{result['machine']['cpus']} cpus, load {result['machine']['load_at_start'][0]:.1f})"
    )
    print(
        f"{'trials':>7} {'raw/s':>8} {'inproc/s':>9} {'pipe/s':>8} {'pipe/raw':>9} "
        f"{'pipe/inproc':>12}  peak RSS MB per worker; CPU ms per trial"
    )
    for row in result["scales"]:
        rss = " ".join(f"{k}={v:.0f}" for k, v in row["peak_rss_mb"].items() if v)
        rss += " (now " + " ".join(f"{v:.0f}" for v in row.get("rss_mb", {}).values() if v) + ")"
        rss += "; " + " ".join(f"{k}={v:.1f}" for k, v in row.get("cpu_ms_per_trial", {}).items())
        print(
            f"{row['trials']:>7} {row['raw_trials_per_s']:>8.0f}"
            f" {row['inprocess_trials_per_s']:>9.0f}"
            f" {row['pipeline_trials_per_s']:>8.1f} {row['pipeline_over_raw']:>9.3f}"
            f" {row['pipeline_over_inprocess']:>12.3f}  {rss}"
        )
    for name, value in result.get("ratios", {}).items():
        print(f"{name}: {value:.3f}")
    for name, by_worker in result.get("rss_ratios", {}).items():
        print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in by_worker.items()))
    for row in result.get("variants", []):
        print(
            f"variant workers={row['workers']}: {row['trials']} trials, "
            f"{row['pipeline_trials_per_s']:.1f} trials/s, peak RSS {row['peak_rss_mb']}"
        )
    lat = result.get("latency")
    if lat:
        print(
            f"latency at {lat['offered_trials_per_s']:.0f} trials/s for {lat['seconds']:.0f} s: "
            + (
                f"p50 {lat['p50_s']:.3f} s, p99 {lat['p99_s']:.3f} s, max {lat['max_s']:.3f} s "
                f"({lat['verdicts']}/{lat['trials']} verdicts)"
                if "p50_s" in lat
                else f"only {lat['verdicts']} verdicts"
            )
        )
        if lat.get("cpu_ms_per_trial"):
            print(
                "  CPU ms per trial: "
                + " ".join(f"{k}={v:.2f}" for k, v in lat["cpu_ms_per_trial"].items())
                + f"; load {lat['load'][0]:.1f} -> {lat['load'][1]:.1f}"
            )
        if lat.get("p50_by_tenth_s"):
            print(
                "  p50 by tenth of the run: " + " ".join(f"{v:.2f}" for v in lat["p50_by_tenth_s"])
            )
        for stage, q in lat.get("stages", {}).items():
            if "p50_s" in q:
                print(
                    f"  {stage}: p50 {q['p50_s']:.3f} s, p99 {q['p99_s']:.3f} s, "
                    f"max {q['max_s']:.3f} s ({q['n']})"
                )
    rb = result.get("rebuild")
    if rb:
        print(
            f"rebuild of {rb['stored']} rows: {rb['rebuild_trials_per_s']:.0f} trials/s; "
            f"raw read of the same topics {rb['raw_trials_per_s']:.0f} trials/s; "
            f"rebuild/raw {rb['rebuild_over_raw']:.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--scales",
        default="2000,10000,50000",
        help="trial counts; empty ('') for the latency run alone",
    )
    parser.add_argument(
        "--workers",
        default=DEFAULT_WORKERS,
        help="the workers to run, e.g. gate,verdict,judge,sink,aggregate",
    )
    parser.add_argument(
        "--compare-workers",
        default="",
        help="another worker set, run once more at 10,000 trials (scaled)",
    )
    parser.add_argument("--rate", type=float, default=200.0, help="latency run: trials/s offered")
    parser.add_argument("--seconds", type=float, default=60.0, help="latency run: for how long")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--no-rebuild", action="store_true")
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="give up on one pipeline run after this many seconds",
    )
    parser.add_argument("--label", default="")
    parser.add_argument(
        "--keep-work",
        action="store_true",
        help="keep the run's directory (worker logs, projections) and print it",
    )
    parser.add_argument(
        "--profile",
        default="",
        help="workers to attach py-spy to during each pipeline run, e.g. "
        "gate,verdict (collapsed stacks in var/bench/profiles/)",
    )
    args = parser.parse_args()
    # A bench stopped with SIGTERM still stops the workers it started (the finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    os.environ.setdefault("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    workers = [w for w in args.workers.split(",") if w]
    factor = float(os.environ.get("PASSK_BENCH_SCALE", "1"))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    result: dict[str, Any] = {
        "label": args.label or commit,
        "commit": commit,
        "workers": workers,
        "scale_factor": factor,
        "bootstrap": bootstrap,
        "machine": machine(),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "scales": [],
    }
    work = Path(tempfile.mkdtemp(prefix="passk-bench-"))
    last_env: dict[str, str] | None = None
    try:
        for n in (scaled(int(s)) for s in args.scales.split(",") if s):
            traffic = generate(n, f"bench-{n}", work)
            trials = trial_count(traffic)
            print(f"{trials} trials: raw...", flush=True)
            raw = raw_round_trip(traffic, trials, bootstrap, work / f"raw-{n}")
            print(f"{trials} trials: in-process...", flush=True)
            (work / f"inproc-{n}").mkdir()
            inproc = in_process(traffic, trials, work / f"inproc-{n}")
            print(f"{trials} trials: pipeline...", flush=True)
            pipe = pipeline(
                traffic,
                trials,
                workers,
                work,
                f"pipe-{n}",
                args.timeout,
                profile=[w for w in args.profile.split(",") if w],
            )
            last_env = pipe.pop("env")
            result["scales"].append(
                {
                    "trials": trials,
                    "raw_trials_per_s": raw,
                    "inprocess_trials_per_s": inproc,
                    "pipeline_trials_per_s": pipe["trials_per_s"],
                    "pipeline_seconds": pipe["seconds"],
                    "pipeline_over_raw": pipe["trials_per_s"] / raw,
                    "pipeline_over_inprocess": pipe["trials_per_s"] / inproc,
                    "peak_rss_mb": pipe["peak_rss_mb"],
                    "rss_mb": pipe["rss_mb"],
                    "cpu_ms_per_trial": pipe["cpu_ms_per_trial"],
                    **({"timed_out_with": pipe["completed"]} if pipe["completed"] < trials else {}),
                }
            )
            print(json.dumps(result["scales"][-1]), flush=True)
        rows = result["scales"]
        if len(rows) > 1:
            first = rows[0]["pipeline_trials_per_s"]
            result["ratios"] = {
                f"{r['trials']}/{rows[0]['trials']} throughput": r["pipeline_trials_per_s"] / first
                for r in rows[1:]
            }
            # the RSS target: each worker's peak after the largest run over the one before
            before, last = rows[-2], rows[-1]
            result["rss_ratios"] = {
                f"peak RSS {last['trials']}/{before['trials']}": {
                    k: v / before["peak_rss_mb"][k]
                    for k, v in last["peak_rss_mb"].items()
                    if v and before["peak_rss_mb"].get(k)
                }
            }
        if args.compare_workers:
            other = [w for w in args.compare_workers.split(",") if w]
            n = scaled(10_000)
            traffic = (
                generate(n, f"bench-{n}", work)
                if not (work / f"bench-{n}.jsonl").exists()
                else work / f"bench-{n}.jsonl"
            )
            trials = trial_count(traffic)
            result["variants"] = []
            for variant in (workers, other):
                pipe = pipeline(
                    traffic, trials, variant, work, f"variant-{'-'.join(variant)}", args.timeout
                )
                pipe.pop("env")
                result["variants"].append(
                    {
                        "workers": ",".join(variant),
                        "trials": trials,
                        "pipeline_trials_per_s": pipe["trials_per_s"],
                        "peak_rss_mb": pipe["peak_rss_mb"],
                    }
                )
        if not args.no_latency:
            print("latency...", flush=True)
            result["latency"] = latency(workers, work, args.rate, args.seconds * factor)
        if not args.no_rebuild and last_env is not None and "sink" in workers:
            print("rebuild...", flush=True)
            result["rebuild"] = rebuild_vs_raw(last_env, rows[-1]["trials"], work)
    finally:
        if args.keep_work:
            print(f"kept (worker logs, projections): {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    result["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = datetime.now(UTC).strftime("%Y-%m-%dT%H%M") + (f"-{args.label}" if args.label else "")
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    print(f"\nwritten: {(RESULTS / f'{name}.json').relative_to(ROOT)}")


if __name__ == "__main__":
    main()
