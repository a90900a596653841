"""What the aggregate processor adds to end-to-end time: the same generated traffic through
the whole pipeline (real broker, the stand-in judge, every processor as its own `passk
worker`), once without the aggregate worker and once with it, in the same run.

Not a test: it prints. End-to-end time runs from the start of the replay until every
trial's verdict is in the SQL projection and, in the run with the aggregate, until the
aggregate has also consumed and committed every verdict. The target: with / without
<= 1.10 at 10,000 trials. Each configuration gets its own topic prefix and database, so
the two runs share nothing but the machine.

    .venv/bin/python bench/aggregate_overhead.py [--trials 10000] [--rounds 1]
        [--profile aggregate,judge --profile-dir var/bench/profiles]

`--profile` attaches py-spy (`record -r 50 -f raw --nonblocking`) to the named workers of
the run *with* the aggregate, from the start of the replay to the end of the run;
summarise a profile with `bench/profile_top.py`.
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
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.launch import (  # noqa: E402
    cpu_seconds,
    free_port,
    profilers,
    stop,
    stop_profilers,
    wait_until,
)
from bench.launch import spawn as passk  # noqa: E402
from services.cli.status import processor_status  # noqa: E402
from services.contract.settings import Settings  # noqa: E402
from services.kafka.admin import create_topics  # noqa: E402
from services.storage.store import Store  # noqa: E402

SCENARIOS = ROOT / "examples" / "scenarios"
BASE = ["gate", "verdict", "judge", "sink"]
RUN_ID = "bench-aggregate"


def one_run(
    traffic: Path,
    trials: int,
    processors: list[str],
    workdir: Path,
    profile: list[str] | None = None,
    profile_dir: Path | None = None,
    prefix: str | None = None,
) -> tuple[float, dict[str, float]]:
    """End-to-end seconds, and the CPU seconds each worker spent. The topics (under
    `prefix`, a fresh one by default) are left on the broker."""
    prefix = prefix or f"passk.bench{uuid.uuid4().hex[:8]}."
    settings = Settings(  # type: ignore[call-arg]
        PASSK_TOPIC_PREFIX=prefix,
        PASSK_DATABASE_URL=f"sqlite:///{workdir / (prefix + 'db')}",
        PASSK_DATA_DIR=str(workdir / prefix),
    )
    create_topics(settings)
    port = free_port()
    env = dict(
        os.environ,
        KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers,
        PASSK_TOPIC_PREFIX=prefix,
        PASSK_DATABASE_URL=settings.database_url,
        PASSK_DATA_DIR=str(settings.data_dir),
        PASSK_SESSION_WAIT_S="30",
        OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1",
        OPENAI_API_KEY="stand-in",
        PASSK_JUDGE_MODEL="passk-standin",
        PYTHONUNBUFFERED="1",
    )
    logs = workdir / f"{prefix}logs"
    logs.mkdir()
    procs = [
        passk(
            env,
            "judge-standin",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            log=logs / "standin.log",
        )
    ]
    try:
        publish = subprocess.run(
            [sys.executable, "-m", "services.cli", "scenarios", "publish", str(SCENARIOS)],
            env=env,
            cwd=ROOT,
            capture_output=True,
        )
        if publish.returncode != 0:
            raise SystemExit(publish.stderr.decode())
        workers = {p: passk(env, "worker", p, log=logs / f"{p}.log") for p in processors}
        procs += workers.values()
        wait_until(
            lambda: all(s.ready for s in processor_status(processors, settings)),
            180,
            "every worker up",
        )
        store = Store(settings.database_url)

        def done() -> bool:
            if not store.has_schema():
                return False
            if sum(s.n for s in store.summaries(RUN_ID)) < trials:
                return False
            return all(s.settled for s in processor_status(processors, settings))

        spies = profilers(workers, profile or [], profile_dir or workdir)
        start = time.monotonic()
        replay = subprocess.run(
            [sys.executable, "-m", "services.cli", "replay", str(traffic)],
            env=env,
            cwd=ROOT,
            capture_output=True,
        )
        if replay.returncode != 0:
            raise SystemExit(replay.stdout.decode() + replay.stderr.decode())
        wait_until(done, 3600, f"{trials} verdicts through {', '.join(processors)}")
        elapsed = time.monotonic() - start
        stop_profilers(spies)
        return elapsed, {p: cpu_seconds(proc.pid) for p, proc in workers.items()}
    finally:
        stop(procs)


def generate(trials: int, workdir: Path) -> Path:
    """The bench's traffic (about `trials` trials over the example scenarios) in
    workdir/traffic.jsonl, its expected outcomes in workdir/expected.json."""
    traffic, expected = workdir / "traffic.jsonl", workdir / "expected.json"
    per_scenario = max(1, trials // len(list(SCENARIOS.glob("*.yaml"))))
    gen = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "generate",
            "--scenarios",
            str(SCENARIOS),
            "--run-id",
            RUN_ID,
            "--out",
            str(traffic),
            "--expected",
            str(expected),
            "--trials",
            str(per_scenario),
            "--seed",
            "3",
            "--default-pass-prob",
            "0.9",
        ],
        env=dict(os.environ),
        cwd=ROOT,
        capture_output=True,
    )
    if gen.returncode != 0:
        raise SystemExit(gen.stderr.decode())
    return traffic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1, help="each round runs both, in turn")
    parser.add_argument(
        "--profile",
        default="",
        help="comma-separated workers to profile with py-spy (run with aggregate)",
    )
    parser.add_argument("--profile-dir", type=Path, default=ROOT / "var" / "bench" / "profiles")
    args = parser.parse_args()
    # Stopped with SIGTERM, still stop every worker it started (the finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="passk-bench-") as tmp:
        workdir = Path(tmp)
        traffic = generate(args.trials, workdir)
        trials = len(json.loads((workdir / "expected.json").read_text())["trials"])
        times: dict[str, list[float]] = {"without": [], "with": []}
        cpu: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
        for round_no in range(args.rounds):
            # Alternate which goes first, so a warming machine favours neither.
            order = ["without", "with"] if round_no % 2 == 0 else ["with", "without"]
            for name in order:
                processors = BASE + (["aggregate"] if name == "with" else [])
                profile = [p for p in args.profile.split(",") if p] if name == "with" else []
                seconds, used = one_run(
                    traffic, trials, processors, workdir, profile, args.profile_dir
                )
                times[name].append(seconds)
                cpu[name].append(used)
                print(
                    f"  round {round_no + 1}: {name:7} aggregate  {seconds:7.1f} s  "
                    f"{trials / seconds:6.1f} trials/s  CPU s: "
                    + ", ".join(f"{p} {c:.1f}" for p, c in used.items()),
                    flush=True,
                )
    without, with_ = min(times["without"]), min(times["with"])
    ratio = with_ / without
    print(f"\n{trials} trials, end to end (best of {args.rounds}):")
    print(f"  without aggregate  {without:7.1f} s   {trials / without:6.1f} trials/s")
    print(f"  with aggregate     {with_:7.1f} s   {trials / with_:6.1f} trials/s")
    print(
        f"  with / without     {ratio:7.3f}   (target <= 1.10: "
        f"{'met' if ratio <= 1.10 else 'NOT met'})"
    )
    # On a shared, loaded machine wall time is noisy; CPU time is what the aggregate costs.
    agg = [c["aggregate"] for c in cpu["with"]]
    rest = [sum(v for p, v in c.items() if p != "aggregate") for c in cpu["with"]]
    cpu_share = min(a / r for a, r in zip(agg, rest, strict=True))
    print(f"  aggregate CPU / other workers' CPU (same run)  {cpu_share:7.3f}")
    results = ROOT / "var" / "bench"
    results.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    (results / f"aggregate-overhead-{stamp}.json").write_text(
        json.dumps(
            {
                "trials": trials,
                "rounds": args.rounds,
                "seconds": times,
                "cpu_seconds": cpu,
                "aggregate_cpu_over_other_workers": cpu_share,
                "ratio_with_over_without": ratio,
                "target": 1.10,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
