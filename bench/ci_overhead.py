"""What a cold `passk ci` spends of its own beyond the conversations: `passk ci` with
nothing running (its own broker, workers and stand-in started, stopped at the end)
against `passk run` on a warm stack (the shared broker, the same four workers started and
joined before the clock starts), the same scenarios, trials and product, in the same run.

Not a test: it prints. The reference product (examples/agent/) runs with the demo fault
plan; both end at the same deploy-gate answer (exit 1). Per round:

  warm run      `passk run --publish` (the conversations, published and acknowledged)
  warm verdicts `passk wait` after it: the warm stack's time to the last verdict
  cold ci       `passk ci` wall time, nothing running; its own phases from --json
  ci's own      cold ci - warm run: start, group joins, last verdict, teardown (target <= 30 s)

    .venv/bin/python bench/ci_overhead.py [--trials 5] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.launch import free_port, spawn, stop, wait_until  # noqa: E402
from services.contract.settings import Settings  # noqa: E402
from services.kafka.admin import create_topics  # noqa: E402

SCENARIOS = ROOT / "examples" / "scenarios"
TARGET = ROOT / "examples" / "agent" / "target-http.yaml"
FAULTS = ROOT / "examples" / "agent" / "faults.demo.json"
WORKERS = ("gate", "judge", "verdict", "sink")


def passk(env: dict[str, str], *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return time.perf_counter() - started, done


def settled(settings: Settings) -> bool:
    from services.cli.status import processor_status

    return all(s.ready for s in processor_status(list(WORKERS), settings))


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="passk-bench-ci-"))
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PASSK_"))}
    base.update(PASSK_AGENT_PORT=str(port), PASSK_SESSION_WAIT_S="15", PYTHONUNBUFFERED="1")
    product = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.agent.server",
            "--port",
            str(port),
            "--db",
            str(work / "agent.db"),
            "--faults",
            f"@{FAULTS}",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    prefix = f"passk.bci{uuid.uuid4().hex[:8]}."
    warm_env = {
        **{k: v for k, v in base.items() if not k.startswith("KAFKA_")},
        "KAFKA_BOOTSTRAP_SERVERS": os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        "PASSK_TOPIC_PREFIX": prefix,
        "PASSK_DATABASE_URL": f"sqlite:///{work / 'warm.db'}",
        "PASSK_DATA_DIR": str(work / "warm"),
    }
    settings = Settings(
        **{
            k: v
            for k, v in warm_env.items()  # type: ignore[arg-type]
            if k.startswith(("KAFKA_", "PASSK_TOPIC"))
        }
    )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        wait_until(lambda: _up(port), 30, "the reference product")
        create_topics(settings)
        standin = free_port()
        procs.append(spawn(warm_env, "judge-standin", "--port", str(standin)))
        warm_env.update(OPENAI_BASE_URL=f"http://127.0.0.1:{standin}/v1", OPENAI_API_KEY="stand-in")
        procs += [spawn(warm_env, "worker", w, log=work / f"{w}.log") for w in WORKERS]
        wait_until(lambda: settled(settings), 300, "the warm stack's workers joined")
        print(
            f"passk ci cold vs passk run warm ({args.trials} trials x 5 example scenarios, "
            f"the reference product with the demo fault plan)"
        )
        for round_ in range(args.rounds):
            run_id = f"bench-warm-{uuid.uuid4().hex[:6]}"
            start_load = load()
            run_s, ran = passk(
                warm_env,
                "run",
                "--scenarios",
                str(SCENARIOS),
                "--target",
                str(TARGET),
                "--run-id",
                run_id,
                "--trials",
                str(args.trials),
                "--publish",
                "--json",
            )
            assert ran.returncode == 0, ran.stderr
            total = json.loads(ran.stdout)["published"]
            wait_s, waited = passk(
                warm_env, "wait", "--run-id", run_id, "--trials", str(total), "--timeout", "600"
            )
            assert waited.returncode == 0, waited.stderr
            cold_env = {
                **{k: v for k, v in base.items() if not k.startswith("KAFKA_")},
                "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
                "PASSK_DATABASE_URL": f"sqlite:///{work / 'cold.db'}",
                "PASSK_DATA_DIR": str(work / "cold"),
                "TMPDIR": str(work),
            }
            ci_s, ci = passk(
                cold_env,
                "ci",
                "--scenarios",
                str(SCENARIOS),
                "--target",
                str(TARGET),
                "--run-id",
                f"bench-cold-{round_}",
                "--trials",
                str(args.trials),
                "--json",
            )
            assert ci.returncode == 1, ci.stderr  # the demo plan's unreliable scenario
            phases = json.loads(ci.stdout)["ci"]["timings_s"]
            print(
                f"  round {round_ + 1} (load {start_load} -> {load()}): warm passk run "
                f"{run_s:.1f} s (+ passk wait {wait_s:.1f} s); cold passk ci {ci_s:.1f} s; "
                f"ci's own {ci_s - run_s:.1f} s beyond the warm run (target <= 30 s)"
            )
            print("    cold ci phases (s): " + ", ".join(f"{k} {v}" for k, v in phases.items()))
    finally:
        stop(procs, grace_s=15)
        product.terminate()
        product.wait(10)
        from tests.support import delete_topics_with_prefix

        delete_topics_with_prefix(settings)


def _up(port: int) -> bool:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).status == 200
    except OSError:
        return False


if __name__ == "__main__":
    main()
