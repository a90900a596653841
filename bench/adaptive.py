"""Adaptive trials against a fixed plan of the same per-scenario interval width, on the
reference product (examples/agent/) through the real broker and every processor.

The product's fault plan sets each scenario's true pass rate: one never faulted
(pass^k = 1), two always faulted (pass^k = 0), one faulted on every fifth trial (p = 0.8,
pass^3 = 0.512: next to the goal 0.5). First `passk run --adaptive --budget B`; then,
in the same run of this script, a fixed plan: `passk run --trials N` with N the n a fixed
plan needs to reach, for every scenario, the interval width the adaptive run reached
(`fixed_plan_trials` / scenarios). It prints the trials each spent (and the ratio) and
each scenario's decision under both; they must agree wherever the fixed plan decides.

Not a test: it prints (and exits 1 when a decision disagrees).

    .venv/bin/python bench/adaptive.py [--budget 80] [--goal 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.launch import free_port, spawn, stop, wait_until  # noqa: E402
from bench.pipeline import fresh_pipeline  # noqa: E402
from services.grading.adaptive import decide  # noqa: E402

EXAMPLES = ROOT / "examples" / "scenarios"
PLAN = {
    "debrief-billable-repair": {},
    "debrief-follow-up-required": {"silent_close": "*"},
    "debrief-warranty-no-charge": {"silent_close": "*"},
    "debrief-safety-incident": {"silent_close": list(range(5, 1000, 5))},
}
WORKERS = ["gate", "judge", "verdict", "aggregate", "sink"]


def passk(env: dict[str, str], *args: str, timeout: float = 1800) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"passk {args[0]} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def up(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=1).status == 200
    except OSError:
        return False


def wait_verdicts(env: dict[str, str], run_id: str, trials: int) -> dict:
    passk(env, "wait", "--run-id", run_id, "--trials", str(trials), "--timeout", "900")
    return json.loads(passk(env, "report", "--run-id", run_id, "--json"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=80)
    parser.add_argument("--goal", type=float, default=0.5)
    parser.add_argument("--credibility", type=float, default=0.9)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="passk-bench-adaptive-"))
    scenarios = work / "scenarios"
    scenarios.mkdir()
    for sid in PLAN:
        shutil.copy(EXAMPLES / f"{sid}.yaml", scenarios / f"{sid}.yaml")
    procs = []
    workers = None
    try:
        judge_port, agent_port = free_port(), free_port()
        procs.append(
            spawn(
                dict(os.environ),
                "judge-standin",
                "--port",
                str(judge_port),
                log=work / "standin.log",
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "examples.agent.server",
                    "--port",
                    str(agent_port),
                    "--db",
                    str(work / "agent.db"),
                    "--faults",
                    json.dumps(PLAN),
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        wait_until(lambda: up(f"http://127.0.0.1:{judge_port}/v1/models"), 60, "stand-in")
        wait_until(lambda: up(f"http://127.0.0.1:{agent_port}/healthz"), 60, "product")
        os.environ.update(
            OPENAI_BASE_URL=f"http://127.0.0.1:{judge_port}/v1",
            OPENAI_API_KEY="stand-in",
            PASSK_JUDGE_MODEL="passk-standin",
            PASSK_SESSION_WAIT_S="10",
        )
        workers, env, _ = fresh_pipeline(WORKERS, work, "adaptive")
        passk(env, "scenarios", "publish", str(scenarios))
        target = work / "target.yaml"
        target.write_text(
            json.dumps(
                {
                    "agent": {
                        "kind": "http",
                        "url": f"http://127.0.0.1:{agent_port}/chat",
                        "timeout_s": 20,
                    },
                    "state": {
                        "kind": "http",
                        "wait_s": 3,
                        "url": f"http://127.0.0.1:{agent_port}/sessions/{{session_id}}",
                    },
                }
            )
        )
        common = ("--scenarios", str(scenarios), "--target", str(target), "--concurrency", "8")

        started = time.monotonic()
        adaptive = json.loads(
            passk(
                env,
                "run",
                *common,
                "--run-id",
                "bench-adaptive",
                "--adaptive",
                "--budget",
                str(args.budget),
                "--goal",
                str(args.goal),
                "--credibility",
                str(args.credibility),
                "--batch",
                "8",
                "--json",
            )
        )
        adaptive_s = time.monotonic() - started
        per_scenario = adaptive["fixed_plan_trials"] // len(PLAN)

        started = time.monotonic()
        fixed_run = json.loads(
            passk(
                env,
                "run",
                *common,
                "--run-id",
                "bench-fixed",
                "--trials",
                str(per_scenario),
                "--json",
            )
        )
        fixed = wait_verdicts(env, "bench-fixed", fixed_run["published"])
        fixed_s = time.monotonic() - started
    finally:
        if workers is not None:
            workers.stop()
        stop(procs)

    print(
        f"adaptive vs a fixed plan of the same per-scenario interval width "
        f"(goal {args.goal}, {args.credibility:.0%} interval, budget {args.budget})"
    )
    print(f"{'scenario':32} {'adaptive n':>10} {'decision':>10} {'fixed n':>8} {'decision':>10}")
    disagree = []
    goals = {s["scenario_id"]: s["goal"] for s in adaptive["scenarios"]}
    fixed_by = {s["scenario_id"]: s for s in fixed["scenarios"]}
    for s in adaptive["scenarios"]:
        f = fixed_by[s["scenario_id"]]
        judged = f["passed"] + f["failed"]
        fixed_decision = decide(
            judged, f["passed"], f["k"], goals[s["scenario_id"]], args.credibility
        )[2]
        if fixed_decision != "undecided" and fixed_decision != s["decision"]:
            disagree.append(s["scenario_id"])
        print(
            f"{s['scenario_id']:32} {s['n']:>10} {s['decision']:>10} {judged:>8} "
            f"{fixed_decision:>10}"
        )
    fixed_trials = sum(f["n"] + f.get("invalid", 0) for f in fixed["scenarios"])
    print(
        f"trials: adaptive {adaptive['trials_run']} ({adaptive_s:.0f} s), fixed plan "
        f"{fixed_trials} ({fixed_s:.0f} s); ratio {adaptive['trials_run'] / fixed_trials:.2f}"
        f" (predicted fixed plan: {adaptive['fixed_plan_trials']})"
    )
    print(
        "decisions: "
        + (
            "equal wherever the fixed plan decides"
            if not disagree
            else f"DIFFER for {', '.join(disagree)}"
        )
    )
    shutil.rmtree(work, ignore_errors=True)
    raise SystemExit(1 if disagree else 0)


if __name__ == "__main__":
    main()
