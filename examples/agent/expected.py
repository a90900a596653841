"""What a `passk run` against the reference product must give, from the product's own
fault switches alone (never from passk's gates): a trial with a fault switched on fails,
every other trial passes. Written for `passk wait --expected` (`make demo` uses it).

    python -m examples.agent.expected --scenarios DIR --run-id ID --trials N \
        [--faults JSON|@FILE] > expected.json

The plan must put each fault where a gate sees it (`lost_field` drops the billing lines:
only on scenarios that expect them).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import yaml

from examples.agent.debrief import faults_for
from examples.agent.server import load_plan


def expected(scenarios: dict[str, int], run_id: str, trials: int,
             plan: dict[str, dict[str, list[int] | str]]) -> dict[str, object]:
    rows, out = [], []
    for scenario_id, k in sorted(scenarios.items()):
        n = max(trials, k)
        passed = 0
        for number in range(1, n + 1):
            faults = faults_for(plan, scenario_id, number)
            passed += not faults
            out.append({"trial_id": f"{run_id}:{scenario_id}:{number:03d}",
                        "scenario_id": scenario_id, "faults": faults,
                        "expected_outcome": "failed" if faults else "passed"})
        rows.append({"scenario_id": scenario_id, "k": k, "n": n, "passed": passed})
    return {"run_id": run_id, "scenarios": rows, "trials": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=Path, required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--trials", type=int, default=0)
    parser.add_argument("--faults", default=os.environ.get("PASSK_AGENT_FAULTS"))
    args = parser.parse_args()
    ks = {}
    for file in sorted(args.scenarios.glob("*.y*ml")):
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
        ks[raw["id"]] = int(raw.get("trials", 3))
    print(json.dumps(expected(ks, args.run_id, args.trials, load_plan(args.faults)), indent=1))


if __name__ == "__main__":
    main()
