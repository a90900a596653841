"""The checks of the continuous half of `make demo` (infra/stack/demo-continuous.sh).

`baseline SCENARIO HOUR`   prints the trials the scenario's window starting HOUR already
                           held (the CI part's, an earlier demo's), as `n passed`, so the
                           expected figure counts them too.
`show ...`                 after the replay: waits for the window in `passk windows --json`,
                           prints the expected figures (from the generator's plan plus the
                           baseline), Prometheus's passk_scenario_pass_hat_k for the scenario
                           (its HTTP API), the drop alert firing there, and the notification
                           the loopback webhook received. Each wait has a deadline; a figure
                           that disagrees with the plan is an error (exit 1).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import datetime
from math import comb
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
PASSK = str(ROOT / ".venv" / "bin" / "passk")
T = TypeVar("T")


def wait(what: str, check: Callable[[], T | None], timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1.0)


def baseline(scenario: str, hour: str) -> tuple[int, int]:
    """(n, passed) of the scenario's window starting `hour` as the aggregate counted it
    before the replay (the CI part's trials, an earlier demo's), once the aggregate and the
    sink have read everything: the expected figure adds the plan's trials to these."""
    from services.cli.status import processor_status
    from services.contract.settings import get_settings
    from services.storage.store import Store

    settings = get_settings()
    wait("the aggregate and the sink to catch up",
         lambda: all(s.settled for s in processor_status(["aggregate", "sink"], settings)), 180)
    start = datetime.fromisoformat(hour.replace("Z", "+00:00"))
    store = Store(settings.database_url)
    try:
        rows = [r for r in store.windows(size="1h", scenarios=[scenario])
                if r.window_start.replace(tzinfo=start.tzinfo) == start]
    finally:
        store.close()
    return (rows[0].n, rows[0].passed) if rows else (0, 0)


def prometheus(url: str, path: str, **params: str) -> dict[str, Any]:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{url}{path}{query}", timeout=10) as answer:
        body = json.loads(answer.read())
    return body["data"]  # type: ignore[no-any-return]


def windows_json() -> list[dict[str, Any]]:
    done = subprocess.run([PASSK, "windows", "--json", "--window", "1h", "--last", "1"],
                          capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout)["windows"] if done.returncode == 0 else []


def show(args: argparse.Namespace) -> int:
    plan = json.loads(Path(args.expected).read_text())
    trials = [t for t in plan["trials"] if t["scenario_id"] == args.scenario]
    k = next(s["k"] for s in plan["scenarios"] if s["scenario_id"] == args.scenario)
    base_n, base_c = args.base_n, args.base_passed
    n = base_n + len(trials)
    c = base_c + sum(t["expected_outcome"] == "passed" for t in trials)
    expected = comb(c, k) / comb(n, k)
    start = args.hour
    print(f"plan: {args.scenario} in the window {start} (1h): "
          f"{c - base_c} of {len(trials)} generated trials pass"
          + (f", plus {base_c} of {base_n} the window already held (the CI part's, any earlier demo's)"
             if base_n else "")
          + f" -> n={n}, c={c}, k={k}, expected pass^k = C({c},{k})/C({n},{k}) = {expected:.4f}")

    def window_done() -> dict[str, Any] | None:
        for w in windows_json():
            if (w["scenario_id"] == args.scenario and w["window_start"] == start
                    and w["n"] == n):
                return w
        return None

    w = wait("the window in the projection", window_done, 180)
    if abs((w["pass_hat_k"] or 0.0) - expected) > 1e-9:
        print(f"demo: passk windows says pass^k {w['pass_hat_k']}, the plan {expected}")
        return 1
    print(f"passk windows: pass^k {w['pass_hat_k']:.4f} = the plan's "
          f"(interval [{w['pass_hat_k_lower']:.3f}, {w['pass_hat_k_upper']:.3f}], "
          f"alert condition {'held' if w['alert_condition'] else 'did not hold'})")
    if not args.prometheus:
        return 0

    print(f"\n== Prometheus ({args.prometheus}): "
          f'passk_scenario_pass_hat_k{{scenario="{args.scenario}"}}')
    expr = f'passk_scenario_pass_hat_k{{scenario="{args.scenario}"}}'

    def scraped() -> list[dict[str, Any]] | None:
        got = prometheus(args.prometheus, "/api/v1/query", query=expr)["result"]
        hourly = [r for r in got if r["metric"].get("window") == "1h"]
        ok = hourly and abs(float(hourly[0]["value"][1]) - expected) < 1e-9
        return got if ok else None

    for r in wait("Prometheus to scrape the figure", scraped, 120):
        m = r["metric"]
        print(f"  {r['metric']['__name__']}{{scenario=\"{m['scenario']}\", "
              f"window=\"{m['window']}\", job=\"{m.get('job')}\"}} = {float(r['value'][1]):.4f}")

    print("\n== the drop alert (Prometheus /api/v1/alerts)")

    def firing() -> list[dict[str, Any]] | None:
        alerts = prometheus(args.prometheus, "/api/v1/alerts")["alerts"]
        mine = [a for a in alerts if a["labels"]["alertname"] == "PasskScenarioReliabilityDrop"
                and a["labels"].get("scenario") == args.scenario and a["state"] == "firing"]
        return mine or None

    for a in wait("PasskScenarioReliabilityDrop to fire", firing, 180):
        print(f"  FIRING since {a.get('activeAt', '?')}: {a['annotations']['summary']}")

    print(f"\n== the notification Alertmanager sent to the demo's webhook ({args.webhook_file})")
    shown = subprocess.run([sys.executable, "-m", "services.monitoring.webhook", "show",
                            args.webhook_file, "PasskScenarioReliabilityDrop", "--wait", "120"],
                           cwd=ROOT, text=True)
    if shown.returncode != 0:  # say where it stopped
        am = prometheus(args.prometheus, "/api/v1/alertmanagers")
        print(f"demo: no notification; Prometheus's Alertmanagers: {am}")
    return shown.returncode


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="demo_continuous")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("baseline")
    b.add_argument("scenario")
    b.add_argument("hour")
    s = sub.add_parser("show")
    s.add_argument("--scenario", required=True)
    s.add_argument("--hour", required=True)
    s.add_argument("--expected", required=True)
    s.add_argument("--base-n", type=int, default=0)
    s.add_argument("--base-passed", type=int, default=0)
    s.add_argument("--prometheus", default="")
    s.add_argument("--webhook-file", default="")
    args = parser.parse_args(argv)
    if args.command == "baseline":
        n, c = baseline(args.scenario, args.hour)
        print(n, c)
        return 0
    return show(args)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
