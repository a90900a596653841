"""The checks of the continuous half of `make demo` (infra/stack/demo-continuous.sh).

`baseline SCENARIO HOUR`   prints the trials the scenario's window starting HOUR already
                           held (an earlier demo's), as `n passed n_sampled passed_sampled`,
                           so the expected figures count them too.
`show ...`                 after the traffic (infra/stack/demo_traces.py): waits for the
                           window in `passk windows --runs 'production-*' --json`, prints the
                           expected figures (from the traffic's plan plus the baseline): over
                           every trial and over the sampled ones; Prometheus's
                           passk_scenario_sampled_pass_hat_k for the scenario (its HTTP API),
                           the drop alert firing there on the sampled figures, and the
                           notification the loopback webhook received. Each wait has a
                           deadline; a figure that disagrees with the plan is an error (exit 1).
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


def baseline(scenario: str, hour: str) -> tuple[int, int, int, int]:
    """(n, passed, n_sampled, passed_sampled) of the scenario's window starting `hour` as
    the aggregate counted it before the traffic (an earlier demo's), once the aggregate and
    the sink have read everything: the expected figures add the plan's trials to these."""
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
    if not rows:
        return 0, 0, 0, 0
    row = rows[0]
    sampled = (row.n_sampled, row.passed_sampled or 0) if row.n_sampled is not None \
        else (row.n, row.passed)
    return row.n, row.passed, *sampled


def prometheus(url: str, path: str, **params: str) -> dict[str, Any]:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{url}{path}{query}", timeout=10) as answer:
        body = json.loads(answer.read())
    return body["data"]  # type: ignore[no-any-return]


def windows_json() -> list[dict[str, Any]]:
    done = subprocess.run([PASSK, "windows", "--json", "--window", "1h", "--last", "1",
                           "--runs", "production-*"],
                          capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout)["windows"] if done.returncode == 0 else []


def show(args: argparse.Namespace) -> int:
    plan = json.loads(Path(args.plan).read_text())
    trials = [t for t in plan["trials"]
              if t["scenario_id"] == args.scenario and t["hour"] == args.hour]
    k = 3  # examples/production: trials: 3
    n = args.base_n + len(trials)
    c = args.base_passed + sum(t["expected_outcome"] == "passed" for t in trials)
    n_s = args.base_sampled + sum(t["sampled"] for t in trials)
    c_s = args.base_passed_sampled + sum(
        t["sampled"] and t["expected_outcome"] == "passed" for t in trials)
    expected = comb(c, k) / comb(n, k)
    expected_s = comb(c_s, k) / comb(n_s, k) if n_s >= k else None
    start = args.hour
    print(f"plan: {args.scenario} in the window {start} (1h): {len(trials)} traces, "
          f"{sum(t['sampled'] for t in trials)} of them in the LLM-judge sample; "
          f"{sum(t['repeats_question'] for t in trials)} re-ask an answered question, of which "
          f"the sampled ones fail"
          + (f"; plus {args.base_n} trials the window already held (an earlier demo's)"
             if args.base_n else ""))
    print(f"plan: all trials n={n}, c={c} -> pass^k = C({c},{k})/C({n},{k}) = {expected:.4f} "
          "(unsampled trials ran gates and deterministic checks only)")
    print(f"plan: sampled n_sampled={n_s}, c={c_s} -> pass^k sampled = "
          + (f"C({c_s},{k})/C({n_s},{k}) = {expected_s:.4f}" if expected_s is not None
             else "none (fewer than k)"))

    def window_done() -> dict[str, Any] | None:
        for w in windows_json():
            if (w["scenario_id"] == args.scenario and w["window_start"] == start
                    and w["n"] == n and w["n_sampled"] == n_s):
                return w
        return None

    w = wait("the window in the projection", window_done, 180)
    if abs((w["pass_hat_k"] or 0.0) - expected) > 1e-9 or (
            expected_s is not None
            and abs((w["pass_hat_k_sampled"] or 0.0) - expected_s) > 1e-9):
        print(f"demo: passk windows says pass^k {w['pass_hat_k']}, sampled "
              f"{w['pass_hat_k_sampled']}; the plan {expected}, {expected_s}")
        return 1
    print(f"passk windows: n={w['n']} pass^k {w['pass_hat_k']:.4f}; n_sampled={w['n_sampled']} "
          f"pass^k sampled {w['pass_hat_k_sampled']:.4f} = the plan's "
          f"(interval [{w['pass_hat_k_sampled_lower']:.3f}, {w['pass_hat_k_sampled_upper']:.3f}], "
          f"alert condition {'held' if w['alert_condition'] else 'did not hold'})")
    if not args.prometheus:
        return 0

    print(f"\n== Prometheus ({args.prometheus}): "
          f'passk_scenario_sampled_pass_hat_k{{scenario="{args.scenario}"}}')
    expr = f'passk_scenario_sampled_pass_hat_k{{scenario="{args.scenario}"}}'

    def scraped() -> list[dict[str, Any]] | None:
        got = prometheus(args.prometheus, "/api/v1/query", query=expr)["result"]
        hourly = [r for r in got if r["metric"].get("window") == "1h"]
        ok = hourly and abs(float(hourly[0]["value"][1]) - (expected_s or 0.0)) < 1e-9
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
    s.add_argument("--plan", required=True)
    s.add_argument("--base-n", type=int, default=0)
    s.add_argument("--base-passed", type=int, default=0)
    s.add_argument("--base-sampled", type=int, default=0)
    s.add_argument("--base-passed-sampled", type=int, default=0)
    s.add_argument("--prometheus", default="")
    s.add_argument("--webhook-file", default="")
    args = parser.parse_args(argv)
    if args.command == "baseline":
        print(*baseline(args.scenario, args.hour))
        return 0
    return show(args)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
