"""Hunt the rare losses (issue 29, item 6): N rounds of generated traffic replayed into a
supervised pipeline, each round SIGKILLing a worker at a random point of its replay, the
broker stopped and started every fifth round, half of the rounds beside a bounded CPU
load; after each round the pipeline is left to settle and `passk audit --json` says
whether every trial is accounted for.

Everything runs on the soak's own broker (started like tests/own_kafka.py does, on its own
ports and data dir: the shared broker on :9092 is never touched), its own topic prefix,
projection and data dir, every processor under supervisord as `make up` runs them (so a
killed worker is restarted by supervisord, not by the soak).

    .venv/bin/python bench/soak.py --rounds 100
    .venv/bin/python bench/soak.py --summary var/soak/<stamp>/results.jsonl

Each round is one line of `results.jsonl` (its parameters, what happened, the audit's
counts and every unaccounted trial); the restarted worker's SIGUSR2 snapshot (its
consumer's partitions and what each task awaits, services/runtime/awaiting.py) is kept in
`snapshots/` and put in the line of a round that was not clean. `--repair` runs
`passk audit --repair` after a dirty round and records whether it came out clean.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent
VICTIMS = ("gate", "judge", "verdict", "sink", "aggregate", "calibration")
SCENARIOS = ROOT / "examples" / "scenarios"
TRIALS_PER_S = 250  # the replay's pace: two events per trial


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def say(*parts: Any) -> None:
    print(f"[{datetime.now(UTC).strftime('%H:%M:%S')}]", *parts, flush=True)


def wait_until(condition: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """The condition's first truthy value, or None once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no user
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


# --------------------------------------------------------------------------- the broker


class Broker:
    """A broker of the soak's own, started and stopped with infra/kafka's scripts."""

    def __init__(self, data: Path, port: int) -> None:
        self.data, self.port = data, port
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
        self.env.update(
            PASSK_KAFKA_DIR=str(data),
            PASSK_KAFKA_PORT=str(port),
            PASSK_KAFKA_CONTROLLER_PORT=str(port + 1),
            PASSK_KAFKA_HEAP="768m",
            PASSK_KAFKA_READY_S="800",
            PYTHON=sys.executable,
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def up(self) -> float:
        started = time.monotonic()
        out = subprocess.run(
            ["bash", "infra/kafka/kafka-up.sh"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if out.returncode != 0:
            raise RuntimeError(f"kafka-up failed: {out.stdout}{out.stderr}")
        return time.monotonic() - started

    def down(self) -> float:
        """Stopped (SIGTERM, its controlled shutdown, SIGKILL after 30 s): kafka-down.sh."""
        started = time.monotonic()
        subprocess.run(
            ["bash", "infra/kafka/kafka-down.sh"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            timeout=120,
        )
        return time.monotonic() - started


# --------------------------------------------------------------------------- the stack


class Stack:
    """Every processor under supervisord, as `make up` runs them, on the soak's settings."""

    def __init__(self, base: Path, broker: Broker, port_base: int) -> None:
        self.base = base
        self.data = base / "data"
        self.logs = base / "logs"
        self.conf = self.data / "run" / "supervisord.conf"
        self.standin_port = port_base + 2
        self.metrics_base = port_base + 10
        self.env = dict(os.environ)
        self.env.update(
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
            KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap,
            PASSK_TOPIC_PREFIX="soak.",
            PASSK_DATABASE_URL=f"sqlite:///{base / 'passk.db'}",
            PASSK_DATA_DIR=str(self.data),
            PASSK_SESSION_WAIT_S="5",
            PASSK_UNCALIBRATED_JUDGES="gating",
            OPENAI_BASE_URL=f"http://127.0.0.1:{self.standin_port}/v1",
            OPENAI_API_KEY="stand-in",
            PASSK_JUDGE_MODEL="passk-standin",
            PASSK_METRICS_PORT_BASE=str(self.metrics_base),
        )
        self.daemon: subprocess.Popen[bytes] | None = None
        self._consumer: Any = None

    def passk(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "services.cli", *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        made = self.passk("topics", "create")
        if made.returncode != 0:
            raise RuntimeError(f"topics create: {made.stderr}")
        made = self.passk(
            "supervise",
            "config",
            "--out",
            str(self.conf),
            "--log-dir",
            str(self.logs),
            "--metrics-base",
            str(self.metrics_base),
            "--standin-port",
            str(self.standin_port),
        )
        if made.returncode != 0:
            raise RuntimeError(f"supervise config: {made.stderr}")
        self.daemon = subprocess.Popen(
            [str(BIN / "supervisord"), "-n", "-c", str(self.conf)],
            env=self.env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        if not wait_until(lambda: all(self.pid(w) for w in VICTIMS), 120):
            raise RuntimeError("supervisord did not start every worker in 120 s")
        published = self.passk("scenarios", "publish", str(SCENARIOS))
        if published.returncode != 0:
            raise RuntimeError(f"scenarios publish: {published.stderr}")

    def stop(self) -> None:
        if self.daemon is None:
            return
        programs = [*VICTIMS, "otlp", "judge-standin"]
        pids = [p for p in (self.pid(w) for w in programs) if p]
        subprocess.run(
            [str(BIN / "supervisorctl"), "-c", str(self.conf), "shutdown"],
            capture_output=True,
            timeout=120,
        )
        try:
            self.daemon.wait(90)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait(10)
        self.daemon = None
        for pid in pids:  # a worker that outlived its supervisord (a broker gone, say)
            if alive(pid):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def pid(self, program: str) -> int | None:
        out = subprocess.run(
            [str(BIN / "supervisorctl"), "-c", str(self.conf), "status", program],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        return int(out.split("pid ")[1].split(",")[0]) if "RUNNING" in out else None

    def kill(self, program: str) -> int | None:
        """SIGKILL, as a crash: no shutdown hooks, no final commit. supervisord restarts it."""
        pid = self.pid(program)
        if pid is not None:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pid

    def snapshot(self, program: str, timeout: float = 30) -> str:
        """The worker's SIGUSR2 snapshot: what it logs of its consumer and its tasks."""
        pid = self.pid(program)
        if pid is None:
            return f"({program} not running)"
        log = self.logs / f"{program}.log"
        start = log.stat().st_size if log.exists() else 0
        os.kill(pid, signal.SIGUSR2)

        def dumped() -> str | None:
            with open(log, "rb") as f:
                f.seek(start)
                added = f.read().decode(errors="replace")
            begin = added.find("asyncio tasks and what each awaits")
            end = added.find("end of tasks", begin)
            # the consumer's partitions (assigned, paused, read, committed) come first
            return added[begin : end + len("end of tasks")] if begin >= 0 and end >= 0 else None

        got = wait_until(dumped, timeout)
        return got or f"(no snapshot from {program} pid {pid} in {timeout:.0f} s)"

    def finished_on_log(self) -> int:
        """How many ConversationFinished records the log holds: the replay's progress."""
        from kafka import KafkaConsumer, TopicPartition

        from services.contract.settings import Settings
        from services.contract.topics import Topic, topic_name
        from services.kafka.kafka_client import kafka_client_kwargs

        with _environ(self.env):
            settings = Settings()
        if self._consumer is None:
            self._consumer = KafkaConsumer(
                **kafka_client_kwargs(settings), request_timeout_ms=20000
            )
        topic = topic_name(Topic.CONVERSATION_FINISHED, settings)
        parts = [
            TopicPartition(topic, p)
            for p in sorted(self._consumer.partitions_for_topic(topic) or ())
        ]
        return sum(self._consumer.end_offsets(parts).values())

    def drop_consumer(self) -> None:
        """The progress meter's client, closed before the broker goes away."""
        if self._consumer is not None:
            with suppress(Exception):
                self._consumer.close()
            self._consumer = None

    def trace(self, trial_ids: set[str]) -> dict[str, dict[str, list[Any]]]:
        """Where each trial's verdict sits on the log: on trial-verdicts, and re-keyed by the
        aggregate on aggregate-by-scenario ([partition, offset, log time, attempt, outcome]
        of each copy), to tell a verdict lost in the aggregate's re-key hop from one read
        and not counted."""
        from services.contract.settings import Settings
        from services.contract.topics import Topic, topic_name
        from services.kafka.scan import scan

        with _environ(self.env):
            settings = Settings()
        found: dict[str, dict[str, list[Any]]] = {t: {} for t in trial_ids}
        for topic in (Topic.TRIAL_VERDICTS, Topic.AGGREGATE_BY_SCENARIO):

            def fold(records: Any, name: str = topic.value) -> None:
                for r in records:
                    try:
                        v = json.loads(r.value)
                    except (ValueError, TypeError):
                        continue
                    if isinstance(v, dict) and v.get("trial_id") in found:
                        found[v["trial_id"]].setdefault(name, []).append(
                            [
                                r.partition,
                                r.offset,
                                r.timestamp / 1000,
                                v.get("attempt"),
                                v.get("outcome"),
                            ]
                        )

            scan(settings, topic_name(topic, settings), fold)
        return found

    def exits(self, since: float) -> list[str]:
        """supervisord's lines of programs that exited since `since` (epoch s)."""
        log = self.logs / "supervisord.log"
        stamp = datetime.fromtimestamp(since).strftime("%Y-%m-%d %H:%M:%S")
        return (
            [
                line.strip()
                for line in log.read_text(errors="replace").splitlines()
                if "exited:" in line and line[:19] >= stamp
            ]
            if log.exists()
            else []
        )

    def statuses(self) -> list[Any]:
        from services.cli.status import processor_status
        from services.contract.settings import Settings

        with _environ(self.env):
            settings = Settings()
            return processor_status(list(VICTIMS), settings)


@contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


# --------------------------------------------------------------------------- the load


@contextmanager
def cpu_load(procs: int) -> Iterator[list[int]]:
    """`procs` busy loops beside the pipeline for the block's duration, then killed."""
    busy = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(procs)
    ]
    try:
        yield [p.pid for p in busy]
    finally:
        for p in busy:
            p.kill()
        for p in busy:
            p.wait(10)


# --------------------------------------------------------------------------- a round


def plan_round(number: int, rng: random.Random, args: argparse.Namespace) -> dict[str, Any]:
    per_scenario = rng.randint(args.min_trials, args.max_trials) // 5
    trials = per_scenario * 5
    return {
        "round": number,
        "victim": VICTIMS[(number - 1) % len(VICTIMS)],
        # blocks of six rounds alternate with and without the load, so that each worker
        # is killed both ways (a load on every other round would tie it to the victim)
        "load": args.load_procs if ((number - 1) // len(VICTIMS)) % 2 == 0 else 0,
        # rounds 1, 6, 11...: the first on partitions no group has committed yet
        "broker_restart": (number - 1) % args.broker_every == 0,
        "trials_per_scenario": per_scenario,
        "trials": trials,
        "seed": args.seed * 100_000 + number,
        # the moments, as the share of the round's trials on the log (the replay's progress)
        "kill_at": round(rng.uniform(0.05, 0.95), 2),
        "broker_stop_at": round(rng.uniform(0.1, 0.9), 2),
        "broker_down_s": round(rng.uniform(5, 20), 1),
    }


def audit(stack: Stack, *extra: str) -> tuple[int, dict[str, Any] | None, str]:
    out = stack.passk("audit", "--json", "--grace", "0", *extra, timeout=1200)
    try:
        report = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else None
    except (json.JSONDecodeError, IndexError):
        report = None
    said = out.stderr.strip()[-2000:] + ("" if report else out.stdout.strip()[-2000:])
    return out.returncode, report, said


def run_round(
    stack: Stack, broker: Broker, plan: dict[str, Any], work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    n = plan["round"]
    run_id = f"soak-{args.stamp}-r{n:03d}"
    rdir = work / f"round-{n:03d}"
    rdir.mkdir(parents=True, exist_ok=True)
    traffic, expected = rdir / "traffic.jsonl", rdir / "expected.json"
    gen = stack.passk(
        "generate",
        "--scenarios",
        str(SCENARIOS),
        "--run-id",
        run_id,
        "--out",
        str(traffic),
        "--expected",
        str(expected),
        "--trials",
        str(plan["trials_per_scenario"]),
        "--seed",
        str(plan["seed"]),
        "--default-pass-prob",
        "0.85",
    )
    if gen.returncode != 0:
        raise RuntimeError(f"generate: {gen.stderr}")
    result: dict[str, Any] = {**plan, "run_id": run_id, "started": now(), "events": []}

    def event(what: str, **more: Any) -> None:
        result["events"].append({"t": round(time.monotonic() - t0, 2), "what": what, **more})

    with cpu_load(plan["load"]) as _busy:
        load_start = os.getloadavg()[0]
        base_offset = stack.finished_on_log()
        t0, wall0 = time.monotonic(), time.time()
        replay = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli",
                "replay",
                str(traffic),
                "--rate",
                str(2 * TRIALS_PER_S),
            ],
            env=stack.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        actions = [(plan["kill_at"], "kill")]
        if plan["broker_restart"]:
            actions.append((plan["broker_stop_at"], "broker"))
        old_pid = None
        for at, what in sorted(actions):
            target = base_offset + int(at * plan["trials"])
            reached = wait_until(
                lambda t=target: replay.poll() is not None or stack.finished_on_log() >= t,
                300,
                interval=0.1,
            )
            sent = stack.finished_on_log() - base_offset
            if what == "kill":
                old_pid = stack.kill(plan["victim"])
                event(
                    "sigkill",
                    worker=plan["victim"],
                    pid=old_pid,
                    trials_on_log=sent,
                    replay_running=replay.poll() is None,
                    on_time=bool(reached),
                )
            else:
                stack.drop_consumer()
                event("broker stop", trials_on_log=sent, took_s=round(broker.down(), 1))
                time.sleep(plan["broker_down_s"])  # the planned outage's length
                event("broker start", took_s=round(broker.up(), 1))
        replay_budget = (
            plan["trials"] / TRIALS_PER_S
            + 180
            + (plan["broker_down_s"] + 120 if plan["broker_restart"] else 0)
        )
        try:
            rc = replay.wait(replay_budget)
        except subprocess.TimeoutExpired:
            replay.send_signal(signal.SIGINT)
            try:
                rc = replay.wait(30)
            except subprocess.TimeoutExpired:
                replay.kill()
                rc = replay.wait(10)
            event("replay hung", budget_s=round(replay_budget))
        tail = (replay.stdout.read().decode(errors="replace") if replay.stdout else "")[-600:]
        event("replay ended", rc=rc)
        result["replay_rc"], result["replay_tail"] = rc, tail
        restarted = wait_until(lambda: (p := stack.pid(plan["victim"])) and p != old_pid and p, 120)
        event(
            "victim running again" if restarted else "victim not restarted in 120 s", pid=restarted
        )
        waited = stack.passk(
            "wait",
            "--run-id",
            run_id,
            "--expected",
            str(expected),
            "--timeout",
            str(args.settle_s),
            timeout=args.settle_s + 120,
        )
        event("passk wait", rc=waited.returncode)
        result["wait_rc"] = waited.returncode
        result["wait_tail"] = (waited.stdout + waited.stderr)[-800:]
        last: list[Any] = []

        def settled() -> bool:
            last[:] = stack.statuses()
            return all(s.settled for s in last)

        ok = wait_until(settled, args.settle_s, interval=1.0)
        event(
            "settled" if ok else "not settled",
            status="; ".join(f"{s.processor}: {s.state}/{s.members}/lag {s.lag}" for s in last),
        )
        result["settled"] = bool(ok)
        result["load_avg"] = [round(load_start, 1), round(os.getloadavg()[0], 1)]
    result["duration_s"] = round(time.monotonic() - t0, 1)

    snap = stack.snapshot(plan["victim"])
    snap_file = work / "snapshots" / f"round-{n:03d}-{plan['victim']}.txt"
    snap_file.parent.mkdir(exist_ok=True)
    snap_file.write_text(snap)
    result["snapshot_file"] = str(snap_file)
    if not ok:  # a stalled processor: its own snapshot too
        for s in last:
            if not s.settled and s.processor != plan["victim"]:
                other = work / "snapshots" / f"round-{n:03d}-{s.processor}.txt"
                other.write_text(stack.snapshot(s.processor))

    result["exits"] = stack.exits(wall0)
    rc, report, err = audit(stack)
    event("audit", rc=rc)
    result["audit_rc"], result["audit_error"] = rc, err if rc not in (0, 1) else ""
    result["audit"] = _brief(report)
    if report is not None and not report["clean"]:
        result["snapshot"] = snap
        aggregate = {
            u["trial_id"]
            for u in report["unaccounted"]
            if u["trial_id"] and u["stopped_at"].startswith("aggregate")
        }
        if aggregate:
            try:
                result["trace"] = stack.trace(aggregate)
            except Exception as exc:  # the round's record matters more
                result["trace"] = {"error": f"{type(exc).__name__}: {exc}"}
        # late or lost: the same audit once more after a while, nothing else changed
        again = wait_until(
            lambda: (a := audit(stack))[1] is not None and a[1]["clean"] and a,
            args.late_s,
            interval=10,
        )
        result["clean_after_wait"] = bool(again)
        event("audit after waiting", clean=bool(again))
        if args.repair and not again:
            rc2, repaired, err2 = audit(stack, "--repair")
            result["repair"] = {
                "rc": rc2,
                "clean": bool(repaired and repaired["clean"]),
                "repaired": (repaired or {}).get("repaired"),
                "unaccounted_after": (repaired or {}).get("unaccounted"),
                "scopes_after": (repaired or {}).get("scopes"),
                "stderr": err2,
            }
            event("audit --repair", rc=rc2)
    result["ended"] = now()
    for f in (traffic,):  # keep expected.json (small); the traffic can be made again
        f.unlink(missing_ok=True)
    return result


def _brief(report: dict[str, Any] | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {
        k: report.get(k)
        for k in (
            "clean",
            "trials",
            "stages",
            "in_flight",
            "dead_lettered",
            "unaccounted",
            "scopes",
        )
    }


# --------------------------------------------------------------------------- summary


def cause(u: dict[str, Any]) -> str:
    detail = u.get("detail") or ""
    for marker in (" (its verdict", " did not land", ": ", " counts "):
        if marker in detail:
            detail = detail.split(marker)[0] + (marker.strip() if "land" in marker else "")
            break
    return f"{u['stopped_at']}: {detail}"


def summary(lines: list[dict[str, Any]]) -> str:
    rounds = [r for r in lines if "round" in r]
    kills = Counter(r["victim"] for r in rounds)
    loaded = sum(1 for r in rounds if r["load"])
    restarts = sum(1 for r in rounds if r["broker_restart"])
    trials = sum(r["trials"] for r in rounds)
    dirty = [r for r in rounds if r.get("audit") and not r["audit"]["clean"]]
    by_stage: Counter[str] = Counter()
    by_cause: Counter[tuple[str, str, bool]] = Counter()
    for r in dirty:
        for u in r["audit"]["unaccounted"]:
            by_stage[u["stopped_at"]] += 1
            by_cause[(cause(u), r["victim"], bool(r["broker_restart"]))] += 1
    unaccounted = sum(by_stage.values())
    late = sum(1 for r in dirty if r.get("clean_after_wait"))
    repaired = [r for r in dirty if "repair" in r]
    out = [
        f"rounds {len(rounds)}, trials {trials:,}, rounds under load {loaded}, "
        f"broker restarts {restarts}",
        "kills by worker: " + ", ".join(f"{w} {kills[w]}" for w in VICTIMS),
        f"audit errors (not 0/1): {sum(1 for r in rounds if r.get('audit') is None)}; "
        f"rounds not settled: {sum(1 for r in rounds if not r.get('settled', True))}; "
        f"wrong or missing outcomes (passk wait exit 1): "
        f"{sum(1 for r in rounds if r.get('wait_rc') not in (0, None))}; "
        f"replays not exit 0: {sum(1 for r in rounds if r.get('replay_rc') not in (0, None))}",
        f"dirty rounds before repair: {len(dirty)} ({late} clean on a later audit, i.e. late "
        f"not lost); unaccounted entries: {unaccounted}",
    ]
    if by_stage:
        out.append("  by stage: " + ", ".join(f"{s} {n}" for s, n in by_stage.most_common()))
        out.append("  | cause | killed worker | broker round | entries |")
        out.append("  |---|---|---|---|")
        for (c, victim, brk), n in by_cause.most_common():
            out.append(f"  | {c} | {victim} | {'yes' if brk else 'no'} | {n} |")
    if repaired:
        clean = sum(1 for r in repaired if r["repair"]["clean"])
        out.append(f"after repair: {clean} of {len(repaired)} repaired rounds clean")
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--min-trials", type=int, default=300)
    ap.add_argument("--max-trials", type=int, default=1500)
    ap.add_argument("--load-procs", type=int, default=3, help="busy loops in a load round")
    ap.add_argument(
        "--settle-s",
        type=float,
        default=420,
        help="bound on each round's wait for verdicts and for settling",
    )
    ap.add_argument(
        "--late-s",
        type=float,
        default=60,
        help="after a dirty audit, how long to audit again for it to come clean",
    )
    ap.add_argument(
        "--repair", action="store_true", help="run `passk audit --repair` after a dirty round"
    )
    ap.add_argument(
        "--broker-every", type=int, default=5, help="stop and start the broker in every Nth round"
    )
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument(
        "--port-base",
        type=int,
        default=15500,
        help="broker, controller (+1), stand-in (+2), /metrics (+10..)",
    )
    ap.add_argument("--until", help="stop starting rounds after this UTC time (HH:MM)")
    ap.add_argument("--out", type=Path, default=ROOT / "var" / "soak")
    ap.add_argument("--summary", type=Path, help="only print the summary of a results file")
    args = ap.parse_args()
    if args.summary:
        lines = [json.loads(x) for x in args.summary.read_text().splitlines() if x.strip()]
        print(summary(lines))
        return 0
    args.stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    work = args.out / args.stamp
    work.mkdir(parents=True)
    results = work / "results.jsonl"
    taken = [
        p
        for p in (
            args.port_base,
            args.port_base + 1,
            args.port_base + 2,
            *range(args.port_base + 10, args.port_base + 20),
        )
        if not port_free(p)
    ]
    if taken:
        sys.exit(f"soak: ports in use: {taken} (choose another --port-base)")

    def stop_soak(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")  # the finally below stops everything

    signal.signal(signal.SIGTERM, stop_soak)
    signal.signal(signal.SIGINT, stop_soak)  # a client library must not keep it
    broker = Broker(work / "kafka", args.port_base)
    stack = Stack(work, broker, args.port_base)
    rng = random.Random(args.seed)
    say(f"soak: {work}; broker {broker.bootstrap}")
    try:
        broker.up()
        stack.start()
        for number in range(1, args.rounds + 1):
            if args.until and now()[11:16] >= args.until:
                say(f"soak: {args.until} UTC reached, no round {number}")
                break
            plan = plan_round(number, rng, args)
            say(f"round {number}: {plan}")
            result = run_round(stack, broker, plan, work, args)
            with open(results, "a") as f:
                f.write(json.dumps(result) + "\n")
            a = result["audit"] or {}
            say(
                f"round {number}: {result['duration_s']} s, audit "
                f"{'clean' if a.get('clean') else 'NOT clean'} ({a.get('trials')} trials, "
                f"{len(a.get('unaccounted') or [])} unaccounted), settled {result['settled']}, "
                f"wait rc {result['wait_rc']}"
            )
    finally:
        stack.drop_consumer()
        stack.stop()
        broker.down()
    lines = [json.loads(x) for x in results.read_text().splitlines()] if results.exists() else []
    print(summary(lines))
    print(f"results: {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
