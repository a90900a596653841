"""Judge cost with and without skip_when_gates_fail, on the demo's traffic.

Not a test: it prints. The traffic is what `make demo` generates (infra/stack/demo.sh:
examples/scenarios, 5 trials each, debrief-follow-up-required passing with p=0.6, the
advisory judge flagged on 40% of trials, seed 7), and a second, degraded build (every
scenario passing with p=0.5) to show how the saving grows with the failure rate. Each
trial is graded twice by the judge's own code: its gates (the gate's `gates_for`), then
its judges through the real client path (the official openai client over HTTP to the
stand-in, cache lookups off, so every judgement is a call), once as today (`grade`) and
once with skip_when_gates_fail (`grade_after_gates`), and its verdict is assembled (the
verdict's `assemble`) from each. It prints model calls and tokens per trial for both,
the calls saved, and whether every trial's outcome is the same both ways and equal to
the generator's plan. The Kafka wiring of the skip (the gate's JudgeRequest) is tested
in tests/integration/test_judge_cost.py; this measures what it saves.

    .venv/bin/python bench/judge_cost.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.judge_throughput import start_standin  # noqa: E402
from schemas.events import ConversationFinished, JudgeVerdict, SessionPersisted  # noqa: E402
from schemas.scenario import Scenario  # noqa: E402
from services.gate.gates import gates_for  # noqa: E402
from services.grading.calibration import CalibrationBook, GatingPolicy  # noqa: E402
from services.grading.scenario_loader import load_scenarios  # noqa: E402
from services.judge.cache import VerdictCache  # noqa: E402
from services.judge.client import JudgeClient, RetryPolicy  # noqa: E402
from services.judge.grading import Grader  # noqa: E402
from services.replay.generate.config import GenerateConfig  # noqa: E402
from services.replay.generate.run import generate  # noqa: E402
from services.storage.db import engine_for  # noqa: E402
from services.verdict import domain as verdict_domain  # noqa: E402

DEMO = {
    "trials": 5,
    "default_pass_prob": 1.0,
    "pass_prob": {"debrief-follow-up-required": 0.6},
    "advisory_flags": {"no_customer_charge_stated": 0.4},
    "seed": 7,
}
DEGRADED = {**DEMO, "default_pass_prob": 0.5, "pass_prob": {}}
POLICY = GatingPolicy(uncalibrated="gating")  # every judge may fail a trial, both ways


def trials_of(scenarios: list[Scenario], knobs: dict) -> tuple[list, dict[str, str]]:
    config = GenerateConfig(
        run_id="bench-judge-cost", started_at=datetime(2026, 12, 1, tzinfo=UTC), **knobs
    )
    traffic = generate(scenarios, config)
    conversations: dict[str, ConversationFinished] = {}
    sessions: dict[str, SessionPersisted] = {}
    for event in traffic.events:  # duplicates collapse, as the gate's join does
        if isinstance(event, ConversationFinished):
            conversations.setdefault(event.session_id, event)
        elif isinstance(event, SessionPersisted):
            sessions.setdefault(event.session_id, event)
    planned = {t.trial_id: t.expected_outcome for t in traffic.expected.trials}
    return [(c, sessions.get(c.session_id)) for c in conversations.values()], planned


def outcome(scenario: Scenario, gates: list, verdicts: list[JudgeVerdict]) -> str:
    state = None
    for g in gates:
        state = verdict_domain.on_gate_result(state, g, now=0)
    for v in verdicts:
        state = verdict_domain.on_judge_verdict(state, v, now=0)
    assert state is not None
    missing = verdict_domain.missing_checks(state, scenario)
    return verdict_domain.assemble(
        state, scenario, missing=missing, waited_s=0, policy=POLICY, book=CalibrationBook()
    ).outcome


def grader(base_url: str, db: Path) -> Grader:
    client = JudgeClient(
        model="gpt-4o-mini",
        base_url=base_url,
        api_key="standin",
        timeout_s=30,
        concurrency=16,
        policy=RetryPolicy(max_retries=2),
    )
    cache = VerdictCache(engine_for(f"sqlite:///{db}"), lookups=False)
    cache.create()
    return Grader(client=client, cache=cache, metrics=None, model="gpt-4o-mini")


def spent(verdicts: list[JudgeVerdict]) -> tuple[int, int]:
    calls = sum(1 for v in verdicts if v.attempts > 0 and not v.cached and v.result != "skipped")
    return calls, sum((v.input_tokens or 0) + (v.output_tokens or 0) for v in verdicts)


async def measure(base_url: str, scenarios: list[Scenario], knobs: dict, tmp: Path) -> dict:
    by_id = {s.id: s for s in scenarios}
    trials, planned = trials_of(scenarios, knobs)
    every = grader(base_url, tmp / "every.db")
    skipping = grader(base_url, tmp / "skipping.db")

    async def one(conv: ConversationFinished, session: SessionPersisted | None) -> dict:
        scenario = by_id[conv.scenario_id]
        gates = gates_for(conv, session, scenario, waited_s=0)
        failed = [g.gate for g in gates if not g.passed]
        asked = await every.grade(conv, scenario)
        skipped = await skipping.grade_after_gates(conv, scenario, failed)
        return {
            "trial": conv.trial_id,
            "gate_failed": bool(failed),
            "every": (*spent(asked), outcome(scenario, gates, asked)),
            "skip": (*spent(skipped), outcome(scenario, gates, skipped)),
        }

    try:
        rows = await asyncio.gather(*(one(c, s) for c, s in trials))
    finally:
        for g in (every, skipping):
            assert g.client is not None
            await g.client.close()
    n = len(rows)
    calls_every = sum(r["every"][0] for r in rows)
    calls_skip = sum(r["skip"][0] for r in rows)
    return {
        "trials": n,
        "gate_failed": sum(r["gate_failed"] for r in rows),
        "calls_every": calls_every,
        "calls_skip": calls_skip,
        "tokens_every": sum(r["every"][1] for r in rows),
        "tokens_skip": sum(r["skip"][1] for r in rows),
        "same": sum(r["every"][2] == r["skip"][2] for r in rows),
        "as_planned": sum(r["every"][2] == planned[r["trial"]] == r["skip"][2] for r in rows),
    }


def main() -> None:
    loaded = load_scenarios(ROOT / "examples" / "scenarios")
    if not loaded.ok:
        raise SystemExit(f"examples/scenarios do not load: {loaded.errors}")
    proc, base_url = start_standin(0)
    try:
        results = []
        with tempfile.TemporaryDirectory() as tmp:
            for name, knobs in (("demo traffic", DEMO), ("degraded build", DEGRADED)):
                where = Path(tmp) / name.replace(" ", "-")
                where.mkdir()
                results.append(
                    (name, asyncio.run(measure(base_url, loaded.scenarios, knobs, where)))
                )
    finally:
        proc.terminate()
        proc.wait(10)
    print(
        "judge cost with and without skip_when_gates_fail (stand-in model, every judgement a call)"
    )
    for name, r in results:
        n = r["trials"]
        saved = r["calls_every"] - r["calls_skip"]
        share = saved / r["calls_every"] if r["calls_every"] else 0.0
        print(
            f"  {name}: {n} trials, {r['gate_failed']} failed by a gate; "
            f"without skip {r['calls_every'] / n:.2f} calls and {r['tokens_every'] / n:.0f} "
            f"tokens per trial; with skip {r['calls_skip'] / n:.2f} calls and "
            f"{r['tokens_skip'] / n:.0f} tokens per trial; calls saved {saved} "
            f"({share:.1%}), tokens saved {r['tokens_every'] - r['tokens_skip']}; "
            f"same outcomes {r['same']} of {n} (as the generator planned: "
            f"{r['as_planned']} of {n})"
        )
        if r["same"] != n:
            raise SystemExit("skipping changed an outcome: the figures would mean nothing")


if __name__ == "__main__":
    main()
