"""Agent failures apart from could-not-judge, on live workers with a real Prometheus and
Alertmanager (infra/prometheus/up.sh, production scrape interval of 15 s).

In one event-time hour, all within one scrape interval: the stand-in judge answers garbage
(`[[standin:malformed]]`) for 9 of a scenario's 12 trials, and another scenario's agent
fails most of its 12 trials. The judge-error alert fires for the first scenario's judge and
the reliability-drop alert for the second scenario only; the first never pages as an agent
regression, although its strict pass^k (errors counted as not passed) is as low."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import beta

from services.contract.settings import Settings
from tests.e2e.conftest import Pipeline, running_pipeline
from tests.e2e.test_monitoring import (  # noqa: F401 - webhook: a fixture
    Monitoring,
    Webhook,
    monitoring_stack,
    webhook,
)
from tests.support import ROOT, wait_for

pytestmark = pytest.mark.e2e
SCENARIOS = ROOT / "examples" / "scenarios"
OUTAGE = "debrief-quick-question"  # its judge answers garbage: could not judge
OUTAGE_JUDGE = "answered_the_question"
AGENT = "debrief-billable-repair"  # its agent regresses
TRIALS, GARBAGE = 12, 9
SCRAPE_S = 15
MARKER = " [[standin:malformed]]"


@pytest.fixture
def pipeline(settings: Settings, tmp_path: Path) -> Iterator[Pipeline]:
    # Judges gate (so a judge error makes the trial `error`), and a garbage answer is not
    # retried: the burst of errors comes at once.
    with running_pipeline(
        settings,
        tmp_path,
        ["gate", "verdict", "judge", "sink", "aggregate"],
        PASSK_UNCALIBRATED_JUDGES="gating",
        PASSK_JUDGE_MAX_RETRIES="0",
        PASSK_SESSION_WAIT_S="20",
    ) as p:
        yield p


@pytest.fixture
def monitoring(
    pipeline: Pipeline,
    webhook: Webhook,  # noqa: F811
    tmp_path: Path,
) -> Iterator[Monitoring]:
    with monitoring_stack(pipeline, webhook, tmp_path, scrape_s=SCRAPE_S) as stack:
        yield stack


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _traffic(pipeline: Pipeline, tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """One hour of both scenarios' trials; GARBAGE of the outage scenario's carry the
    stand-in's garbage marker, and their expected outcome becomes `error`."""
    only = tmp_path / "scenarios"
    only.mkdir()
    for sid in (OUTAGE, AGENT):
        shutil.copy(SCENARIOS / f"{sid}.yaml", only / f"{sid}.yaml")
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(minutes=55)
    raw, expected_file = tmp_path / "raw.jsonl", tmp_path / "expected.json"
    _ok(
        pipeline.passk(
            "generate",
            "--scenarios",
            str(only),
            "--run-id",
            "apart",
            "--out",
            str(raw),
            "--expected",
            str(expected_file),
            "--trials",
            str(TRIALS),
            "--default-pass-prob",
            "1.0",
            "--pass-prob",
            f"{AGENT}=0.25",
            "--quirk-rate",
            "session_missing=0",
            "--seed",
            "19",
            "--start",
            start.isoformat(),
        )
    )
    expected = json.loads(expected_file.read_text())
    garbage = sorted(t["trial_id"] for t in expected["trials"] if t["scenario_id"] == OUTAGE)[
        :GARBAGE
    ]
    lines = []
    for line in raw.read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "conversation_finished" and event["trial_id"] in garbage:
            first = next(m for m in event["transcript"] if m["role"] == "user")
            first["content"] = (first.get("content") or "") + MARKER
        lines.append(json.dumps(event))
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("\n".join(lines) + "\n")
    for t in expected["trials"]:
        if t["trial_id"] in garbage:
            t["expected_outcome"] = "error"
    expected_file.write_text(json.dumps(expected))
    return traffic, expected_file, expected


def _upper(c: int, n: int, k: int) -> float:
    return float(beta.ppf(0.95, c + 1, n - c + 1)) ** k


def test_a_judge_outage_pages_the_judge_alert_and_an_agent_regression_the_drop_alert(
    pipeline: Pipeline,
    monitoring: Monitoring,
    webhook: Webhook,  # noqa: F811
    tmp_path: Path,
) -> None:
    _ok(pipeline.passk("scenarios", "publish", str(SCENARIOS)))
    traffic, expected_file, expected = _traffic(pipeline, tmp_path)
    by = {
        sid: [t for t in expected["trials"] if t["scenario_id"] == sid] for sid in (OUTAGE, AGENT)
    }
    agent_passed = sum(t["expected_outcome"] == "passed" for t in by[AGENT])
    outage_passed = sum(t["expected_outcome"] == "passed" for t in by[OUTAGE])
    assert outage_passed == TRIALS - GARBAGE
    # The plan, from the generator: the agent's drop is confident over its judged trials;
    # the outage scenario's strict pass^k would look as bad (3 of 12 passed).
    assert _upper(agent_passed, TRIALS, 3) < 0.8
    assert (
        _upper(outage_passed, TRIALS, 3) < 0.8
        and _upper(TRIALS - GARBAGE, TRIALS - GARBAGE, 3) > 0.5
    )

    # The judge's verdict series exist at 0 before any verdict (created from the catalog).
    def judge_series_at_zero() -> bool:
        got = monitoring.query(
            f'passk_judge_verdicts_total{{judge="{OUTAGE_JUDGE}",result="error"}}'
        )
        return bool(got) and float(got[0]["value"][1]) == 0.0

    wait_for(
        judge_series_at_zero,
        timeout=120,
        interval=1.0,
        what="the judge's error series scraped at 0",
    )

    # Right after a scrape of the judge, so that the whole burst lands before the next one.
    def scraped_at() -> float:
        got = monitoring.query('timestamp(up{job="passk-judge"})')
        return float(got[0]["value"][1]) if got else 0.0

    before = scraped_at()
    wait_for(
        lambda: scraped_at() > before,
        timeout=3 * SCRAPE_S,
        interval=0.2,
        what="a fresh scrape of the judge",
    )
    _ok(pipeline.passk("replay", str(traffic)))
    _ok(
        pipeline.passk(
            "wait", "--run-id", "apart", "--expected", str(expected_file), "--timeout", "300"
        )
    )

    # Every garbage answer landed between two scrapes: the error counter went from 0 to
    # its final value in one step (9 trials; a duplicated delivery is judged again).
    def error_samples() -> list[float] | None:
        got = monitoring.query(
            f'passk_judge_verdicts_total{{judge="{OUTAGE_JUDGE}",result="error"}}[10m]'
        )
        values = [float(v) for _, v in got[0]["values"]] if got else []
        last_seen[:] = [got, monitoring.query("passk_judge_verdicts_total")]
        return values if values and values[-1] >= GARBAGE else None

    last_seen: list[Any] = []

    try:
        samples = wait_for(error_samples, timeout=60, interval=1.0, what="the errors scraped")
    except AssertionError:
        raise AssertionError(f"errors scraped: {last_seen}") from None
    assert samples[0] == 0.0 and set(samples) == {0.0, samples[-1]}, samples

    # The aggregate's gauges carry the errors apart.
    def gauges() -> dict[str, tuple[float, float]] | None:
        errors = {
            r["metric"]["scenario"]: float(r["value"][1])
            for r in monitoring.query('passk_scenario_errors{window="1h"}')
        }
        trials = {
            r["metric"]["scenario"]: float(r["value"][1])
            for r in monitoring.query('passk_scenario_trials{window="1h"}')
        }
        want = {OUTAGE: (GARBAGE, TRIALS), AGENT: (0, TRIALS)}
        got = {s: (errors.get(s), trials.get(s)) for s in want}
        return got if got == want else None  # type: ignore[return-value]

    wait_for(gauges, timeout=120, interval=1.0, what="errors and trials per window")

    seen: dict[str, set[str]] = {
        "PasskScenarioReliabilityDrop": set(),
        "PasskJudgeErrorRate": set(),
    }

    def both_firing() -> bool:
        for alert in monitoring.alerts():
            name = alert["labels"]["alertname"]
            if name == "PasskScenarioReliabilityDrop":
                seen[name].add(alert["labels"]["scenario"])  # pending or firing
            if name == "PasskJudgeErrorRate":
                seen[name].add(alert["labels"]["judge"])
        firing = {
            (a["labels"]["alertname"], a["labels"].get("scenario") or a["labels"].get("judge"))
            for a in monitoring.alerts()
            if a["state"] == "firing"
        }
        return {
            ("PasskScenarioReliabilityDrop", AGENT),
            ("PasskJudgeErrorRate", OUTAGE_JUDGE),
        } <= firing

    wait_for(
        both_firing,
        timeout=240,
        interval=1.0,
        what="the judge alert and the agent's drop alert firing",
    )
    # A few more evaluations: the outage scenario never pages as a drop, not even pending.
    until = time.monotonic() + 4 * SCRAPE_S
    while time.monotonic() < until:
        both_firing()
        time.sleep(1.0)
    assert seen["PasskScenarioReliabilityDrop"] == {AGENT}
    assert seen["PasskJudgeErrorRate"] == {OUTAGE_JUDGE}

    # Alertmanager delivered both, and no drop alert for the outage scenario.
    wait_for(
        lambda: (
            webhook.firing("PasskJudgeErrorRate") and webhook.firing("PasskScenarioReliabilityDrop")
        ),
        timeout=120,
        interval=1.0,
        what="both alerts delivered to the webhook",
    )
    assert {a["labels"]["scenario"] for a in webhook.firing("PasskScenarioReliabilityDrop")} == {
        AGENT
    }
    assert {a["labels"]["judge"] for a in webhook.firing("PasskJudgeErrorRate")} == {OUTAGE_JUDGE}

    # The deploy gate stays strict: the run fails on both scenarios.
    gate = pipeline.passk("gate", "--run-id", "apart")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert OUTAGE in gate.stdout and AGENT in gate.stdout
