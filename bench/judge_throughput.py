"""Judge throughput against the stand-in: how close the client gets to concurrency ÷ latency.

Not a test: it prints. It drives the real judge client path (the official openai async
client over HTTP, JSON-schema answers, parsing, the concurrency bound) against a stand-in
server in its own process answering after a fixed latency (default 200 ms), and reports

    throughput (verdicts/s), ideal = concurrency / latency, ratio = throughput / ideal

at the default concurrency (PASSK_JUDGE_CONCURRENCY, 16) and, as a baseline measured in
the same run, at concurrency 1. The target at the default concurrency is a ratio >= 0.8.

    .venv/bin/python bench/judge_throughput.py [--latency-ms 200] [--calls 320] [--concurrency N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from schemas.events import Message  # noqa: E402
from services.contract.settings import Settings  # noqa: E402
from services.judge.client import JudgeClient, RetryPolicy  # noqa: E402

TRANSCRIPT = [
    Message(role="assistant", content="What was the fault?"),
    Message(role="user", content="The pump seized; I replaced it and ran a pressure test."),
    Message(role="assistant", content="Which part number did you fit?"),
    Message(role="user", content="PUMP-7."),
    Message(role="assistant", content="Recorded. Goodbye."),
]


def start_standin(latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "judge-standin", "--port", "0",
         "--latency-ms", str(latency_ms)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"(http://127\.0\.0\.1:\d+/v1)", line)
    if not found:
        proc.terminate()
        raise SystemExit(f"the stand-in did not start: {line!r}")
    return proc, found.group(1)


async def measure(base_url: str, concurrency: int, calls: int) -> dict[str, float]:
    client = JudgeClient(
        model="gpt-4o-mini", base_url=base_url, api_key="standin", timeout_s=30,
        concurrency=concurrency, policy=RetryPolicy(max_retries=0),
    )  # fmt: skip
    try:
        # Warm up: open the connections this concurrency will use.
        await asyncio.gather(*(client.judge("warm", "x", TRANSCRIPT) for _ in range(concurrency)))
        started = time.perf_counter()
        results = await asyncio.gather(
            *(client.judge(f"judge_{i % 7}", f"assertion {i}", TRANSCRIPT) for i in range(calls))
        )
        elapsed = time.perf_counter() - started
    finally:
        await client.close()
    failed = sum(r.answer is None for r in results)
    if failed:
        raise SystemExit(f"{failed} of {calls} calls failed; the figures would mean nothing")
    return {"calls": calls, "seconds": elapsed, "throughput": calls / elapsed}


def main() -> None:
    default_concurrency = Settings().judge_concurrency  # type: ignore[call-arg]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--concurrency", type=int, default=default_concurrency)
    parser.add_argument("--calls", type=int, default=0, help="default: 20 waves")
    args = parser.parse_args()
    latency_s = args.latency_ms / 1000
    proc, base_url = start_standin(args.latency_ms)
    try:
        rows = []
        for concurrency, calls in (
            (1, 10),
            (args.concurrency, args.calls or 20 * args.concurrency),
        ):
            figures = asyncio.run(measure(base_url, concurrency, calls))
            ideal = concurrency / latency_s
            rows.append({"concurrency": concurrency, **figures, "ideal": ideal,
                         "ratio": figures["throughput"] / ideal})  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"judge throughput against the stand-in at {args.latency_ms:g} ms latency")
    for row in rows:
        print(
            f"  concurrency {row['concurrency']:>3}: {row['calls']:>4} calls in "
            f"{row['seconds']:6.2f} s = {row['throughput']:7.2f} verdicts/s; "
            f"ideal concurrency/latency = {row['ideal']:7.2f}/s; ratio {row['ratio']:.3f}"
        )
    target = rows[-1]["ratio"]
    print(
        f"  ratio at the default concurrency: {target:.3f} (target >= 0.8: "
        f"{'met' if target >= 0.8 else 'NOT met'}); baseline ratio at 1: {rows[0]['ratio']:.3f}"
    )
    print(json.dumps({"bench": "judge_throughput", "latency_ms": args.latency_ms, "rows": rows}))


if __name__ == "__main__":
    main()
