"""What `passk run` adds per trial: the harness (simulated user, adapter, per-reply timeout,
state probe, both events published to the real broker and acknowledged) against a plain
loop that calls the same reference product directly (POST each script line, GET the
session), in the same run, at concurrency 1 and 8.

Not a test: it prints. The product (examples/agent/server.py) runs in its own process, the
broker is the shared one (its own topic prefix, deleted after). Per-trial time is wall
time of the batch / trials; overhead ratio = harness / plain loop.

    .venv/bin/python bench/harness_overhead.py [--trials 200] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from bench.launch import free_port, wait_until  # noqa: E402
from services.contract.settings import Settings  # noqa: E402
from services.grading.scenario_loader import load_scenarios  # noqa: E402
from services.harness.adapters import HttpClient  # noqa: E402
from services.harness.domain import plan_trials  # noqa: E402
from services.harness.log import publisher  # noqa: E402
from services.harness.probes import HttpStateProbe  # noqa: E402
from services.harness.runner import Harness, UserFactory  # noqa: E402
from services.harness.target import HttpAgent, HttpProbe  # noqa: E402
from services.kafka.admin import create_topics  # noqa: E402
from services.kafka.producer import TrafficProducer  # noqa: E402

SCENARIO = "debrief-billable-repair"


async def plain_loop(base: str, script: list[str], trials: int, concurrency: int) -> float:
    """The baseline: the same conversations and session reads, nothing else."""
    slots = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as http:

        async def one() -> None:
            async with slots:
                session = None
                for line in script:
                    async with http.post(
                        f"{base}/chat", json={"session_id": session, "message": line}
                    ) as r:
                        body = await r.json()
                    session = body["session_id"]
                    if body["exit_reason"]:
                        break
                async with http.get(f"{base}/sessions/{session}") as r:
                    assert r.status == 200
                    await r.json()

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(trials)))
        return time.perf_counter() - started


async def harness_run(
    base: str, settings: Settings, producer: TrafficProducer, trials: int, concurrency: int
) -> float:
    scenario = next(
        s for s in load_scenarios(ROOT / "examples" / "scenarios").scenarios if s.id == SCENARIO
    )
    plan = plan_trials([scenario], f"bench-{uuid.uuid4().hex[:8]}", trials)
    agent = HttpClient(HttpAgent(kind="http", url=f"{base}/chat"))
    probe = HttpStateProbe(
        HttpProbe(kind="http", url=f"{base}/sessions/{{session_id}}", wait_s=5, interval_s=0.05)
    )
    harness = Harness(
        run_id=plan[0].trial_id.rsplit(":", 2)[0],
        agent=agent,
        probe=probe,
        users=UserFactory(),
        publish=publisher(producer),
        timeout_s=30,
        concurrency=concurrency,
    )
    started = time.perf_counter()
    summary = await harness.run(plan)
    elapsed = time.perf_counter() - started
    await agent.close()
    await probe.close()
    assert summary.published == trials and summary.exits == {"product_closed": trials}, summary
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="passk-bench-harness-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    product = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.agent.server",
            "--port",
            str(port),
            "--db",
            str(work / "agent.db"),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    settings = Settings(PASSK_TOPIC_PREFIX=f"passk.bh{uuid.uuid4().hex[:8]}.")  # type: ignore[call-arg]
    try:

        def up() -> bool:
            try:
                return urllib.request.urlopen(f"{base}/healthz", timeout=1).status == 200
            except OSError:
                return False

        wait_until(up, 30, "the reference product")
        create_topics(settings)
        script = next(
            s for s in load_scenarios(ROOT / "examples" / "scenarios").scenarios if s.id == SCENARIO
        ).user.script  # type: ignore[union-attr]
        with TrafficProducer(settings) as producer:
            asyncio.run(harness_run(base, settings, producer, 10, 2))  # warm both paths
            asyncio.run(plain_loop(base, list(script), 10, 2))
            print(
                f"harness overhead per trial ({args.trials} trials of {SCENARIO}, "
                f"{len(script)} user turns each; plain loop = same product, same calls, "
                "no harness)"
            )
            for concurrency in (1, 8):
                for _ in range(args.rounds):
                    plain = asyncio.run(plain_loop(base, list(script), args.trials, concurrency))
                    run = asyncio.run(
                        harness_run(base, settings, producer, args.trials, concurrency)
                    )
                    per_plain = plain / args.trials * 1000
                    per_run = run / args.trials * 1000
                    print(
                        f"  concurrency {concurrency}: plain loop {per_plain:.2f} ms/trial, "
                        f"passk run {per_run:.2f} ms/trial (incl. publish+ack), "
                        f"overhead {per_run - per_plain:+.2f} ms/trial, "
                        f"ratio {per_run / per_plain:.2f}"
                    )
    finally:
        product.terminate()
        product.wait(10)
        from tests.support import delete_topics_with_prefix

        delete_topics_with_prefix(settings)


if __name__ == "__main__":
    main()
