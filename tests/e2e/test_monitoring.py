"""Monitoring as an operator runs it: every worker's live /metrics, a real Prometheus
scraping them with the rules of infra/prometheus/alerts.yml, a real Alertmanager
delivering to a webhook this test serves on loopback, and every dashboard query run
against that Prometheus. Prometheus and Alertmanager are started by the same script
`make up` uses (infra/prometheus/up.sh), with test-sized intervals."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from services.contract.topics import Topic, topic_name
from services.monitoring.dashboard import build as build_dashboard
from services.monitoring.dashboard import queries as dashboard_queries
from tests.e2e.conftest import PROCESSORS, Pipeline, free_port
from tests.e2e.figures import brute_force
from tests.support import ROOT, read_topic, wait_for

pytestmark = pytest.mark.e2e
SCENARIOS = ROOT / "examples" / "scenarios"
ALERTS = ROOT / "infra" / "prometheus" / "alerts.yml"
DEGRADING = "debrief-billable-repair"
TRIALS = 12  # per scenario and hour: above the default min_trials (10)
HOURS = 4


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def exported_names(text: str) -> set[str]:
    """Every series name a registry can produce, from the exposition: a labelled metric
    with no child yet shows only its # TYPE line, so names follow from the type."""
    names: set[str] = set()
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("_sum", "_count", "_created"),
        "gauge": ("",),
        "info": ("_info",),
    }
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def named_metrics(expr: str) -> set[str]:
    return set(re.findall(r"\bpassk_[a-z_]+\b", expr))


def rule_exprs() -> list[tuple[str, str]]:
    groups = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    return [(r.get("alert") or r.get("record"), r["expr"]) for g in groups for r in g["rules"]]


def test_rules_and_panels_name_only_metrics_the_workers_export(shared_pipeline: Pipeline) -> None:
    pipeline = shared_pipeline  # it only reads every worker's /metrics
    texts = {}
    for name in PROCESSORS:
        port = pipeline.metrics_port(name)
        texts[name] = wait_for(
            lambda port=port: _try_scrape(port),
            timeout=60,
            what=f"{name} serving /metrics on {port}",
        )
    # and the continuous auditor's, a server `make up` supervises beside the workers
    with pipeline.auditing(PASSK_AUDIT_INTERVAL_S="5") as audit_port:
        audited = wait_for(
            lambda: _try_scrape(audit_port),
            timeout=60,
            what=f"the auditor serving /metrics on {audit_port}",
        )
    exported = set().union(*(exported_names(t) for t in [*texts.values(), audited]))
    # stream health is on every worker, not only on some
    for name, text in texts.items():
        assert {"passk_consumer_lag", "passk_events_total"} <= exported_names(text), name
    used = [(f"alert {a}", e) for a, e in rule_exprs()]
    used += [(f"panel {t}", e) for t, e in dashboard_queries(build_dashboard())]
    missing = {(where, m) for where, expr in used for m in named_metrics(expr) - exported}
    assert not missing, f"rules/panels name metrics no worker exports: {sorted(missing)}"
    # and the check has teeth: what it reads covers the main figures
    assert {m for _, e in used for m in named_metrics(e)} >= {
        "passk_scenario_pass_hat_k",
        "passk_consumer_lag",
        "passk_dead_letters_total",
        "passk_audit_unaccounted_trials",
    }


def wait_seeing(check: Callable[[], tuple[bool, object]], *, timeout: float, what: str) -> None:
    """wait_for a check that returns (done, what it saw); a timeout names the last seen."""
    seen: dict[str, object] = {}

    def poll() -> bool:
        done, seen["last"] = check()
        return done

    try:
        wait_for(poll, timeout=timeout, interval=1.0, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {seen.get('last')!r}") from None


def _try_scrape(port: int) -> str | None:
    try:
        return scrape(port)
    except OSError:
        return None


# --------------------------------------------------------------------- the live stack


@dataclass
class Webhook:
    """Alertmanager's webhook receiver: records every payload it is sent."""

    payloads: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0

    def firing(self, alertname: str) -> list[dict[str, Any]]:
        return [
            a
            for p in list(self.payloads)
            for a in p.get("alerts", [])
            if a["labels"].get("alertname") == alertname and a["status"] == "firing"
        ]


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hook.payloads.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Monitoring:
    prometheus: str
    alertmanager: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self._get("/api/v1/query", query=expr)["result"]  # type: ignore[no-any-return]

    def query_range(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
        return self._get(
            "/api/v1/query_range", query=expr, start=str(start), end=str(end), step="2"
        )["result"]  # type: ignore[no-any-return]

    def alerts(self) -> list[dict[str, Any]]:
        return self._get("/api/v1/alerts")["alerts"]  # type: ignore[no-any-return]

    def _get(self, path: str, **params: str) -> dict[str, Any]:
        url = f"{self.prometheus}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return body["data"]  # type: ignore[no-any-return]


@contextmanager
def monitoring_stack(
    pipeline: Pipeline, webhook: Webhook, tmp_path: Path, *, scrape_s: int = 1
) -> Iterator[Monitoring]:
    """infra/prometheus/up.sh scraping the pipeline's workers every scrape_s and alerting
    to the webhook soon (5 s `for:`, 1 s grouping); down.sh afterwards."""
    if not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")):
        pytest.fail("apt-get install prometheus prometheus-alertmanager (.ci/run does)")
    env = {
        **pipeline.env,
        "PASSK_METRICS_PORT_BASE": str(pipeline.metrics_base),
        "PASSK_PROMETHEUS_URL": f"http://127.0.0.1:{free_port()}",
        "PASSK_ALERTMANAGER_URL": f"http://127.0.0.1:{free_port()}",
        "PASSK_MONITORING_DIR": str(tmp_path / "monitoring"),
        "PASSK_SCRAPE_INTERVAL": f"{scrape_s}s",
        "PASSK_ALERT_FOR": "5s",
        "PASSK_ALERT_WEBHOOK_URL": f"http://127.0.0.1:{webhook.port}/alerts",
        "PASSK_ALERT_GROUP_WAIT": "1s",
        "PASSK_ALERT_GROUP_INTERVAL": "1s",
    }
    up = subprocess.run(
        ["bash", "infra/prometheus/up.sh"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "Prometheus http://" in up.stdout, up.stdout
        yield Monitoring(env["PASSK_PROMETHEUS_URL"], env["PASSK_ALERTMANAGER_URL"])
    finally:
        down = subprocess.run(
            ["bash", "infra/prometheus/down.sh"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "stopped prometheus" in down.stdout, down.stdout + down.stderr


@pytest.fixture
def monitoring(pipeline: Pipeline, webhook: Webhook, tmp_path: Path) -> Iterator[Monitoring]:
    with monitoring_stack(pipeline, webhook, tmp_path) as stack:
        yield stack


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _current_windows(records: list[dict[str, Any]], window: str) -> dict[str, dict[str, Any]]:
    """Each scenario's latest window of that size, as its last record says."""
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        if r.get("window") == window and r.get("run_id") is None:
            last[(r["scenario_id"], r["window_start"])] = r
    out: dict[str, dict[str, Any]] = {}
    for (scenario, _start), record in sorted(last.items()):
        out[scenario] = record  # sorted by start: the latest wins
    return out


def test_prometheus_alertmanager_and_the_dashboard_on_live_workers(
    pipeline: Pipeline, monitoring: Monitoring, webhook: Webhook, tmp_path: Path
) -> None:
    began = time.time()
    # The continuous auditor too, as `make up` runs it (its panels need its figures):
    # stopped with the pipeline.
    pipeline.start(
        "audit",
        "worker",
        "audit",
        env={
            "PASSK_METRICS_PORT": str(pipeline.metrics_port("audit")),
            "PASSK_AUDIT_INTERVAL_S": "2",
            "PASSK_AUDIT_GRACE_S": "30",
        },
    )
    _ok(pipeline.passk("scenarios", "publish", str(SCENARIOS)))
    # Four hours of event time, one batch per epoch-aligned hour; in the last one the
    # degrading scenario passes a fifth of its trials, the others all of theirs.
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    expected: list[dict[str, Any]] = []
    for i in range(HOURS):
        start = hour - timedelta(hours=HOURS - i) + timedelta(minutes=5)
        traffic, expected_file = tmp_path / f"traffic-{i}.jsonl", tmp_path / f"expected-{i}.json"
        degrade = ["--pass-prob", f"{DEGRADING}=0.2"] if i == HOURS - 1 else []
        _ok(
            pipeline.passk(
                "generate",
                "--scenarios",
                str(SCENARIOS),
                "--run-id",
                f"mon-{i}",
                "--out",
                str(traffic),
                "--expected",
                str(expected_file),
                "--trials",
                str(TRIALS),
                "--default-pass-prob",
                "1.0",
                *degrade,
                "--quirk-rate",
                "session_missing=0",
                "--seed",
                str(40 + i),
                "--start",
                start.isoformat(),
            )
        )
        _ok(pipeline.passk("replay", str(traffic)))
        expected.append(json.loads(expected_file.read_text()))
    # one unusable input, so the dead-letter series exist
    producer = KafkaProducer(bootstrap_servers=pipeline.settings.kafka_bootstrap_servers)
    producer.send(
        topic_name(Topic.CONVERSATION_FINISHED, pipeline.settings), b"not json", key=b"broken"
    ).get(30)
    producer.close()
    for i in range(HOURS):
        _ok(
            pipeline.passk(
                "wait",
                "--run-id",
                f"mon-{i}",
                "--expected",
                str(tmp_path / f"expected-{i}.json"),
                "--timeout",
                "300",
            )
        )
    pipeline.wait_settled(timeout=300)

    # The last hour's pass^k per scenario, computed here from the expected outcomes.
    last = expected[-1]
    ks = {s["scenario_id"]: s["k"] for s in last["scenarios"]}
    truth = {
        sid: brute_force(
            [t["expected_outcome"] == "passed" for t in last["trials"] if t["scenario_id"] == sid],
            k,
        )[1]
        for sid, k in ks.items()
    }
    assert truth[DEGRADING] < 0.8 and all(truth[s] == 1.0 for s in truth if s != DEGRADING)

    # The topic says so, and Prometheus says what the topic says.
    records = [v for _, v, _ in read_topic(pipeline.settings, Topic.SCENARIO_RELIABILITY)]
    on_topic = _current_windows(records, "1h")
    assert set(on_topic) == set(ks)
    for sid, record in on_topic.items():
        assert record["n"] == TRIALS and record["pass_hat_k"] == pytest.approx(truth[sid]), sid

    def prometheus_agrees() -> bool | dict[str, float]:
        seen = {
            r["metric"]["scenario"]: float(r["value"][1])
            for r in monitoring.query('passk_scenario_pass_hat_k{window="1h"}')
        }
        want = {sid: float(r["pass_hat_k"]) for sid, r in on_topic.items()}
        return (
            seen.keys() == want.keys() and all(abs(seen[s] - want[s]) < 1e-9 for s in want) or seen
        )

    wait_for(
        prometheus_agrees,
        timeout=120,
        interval=1.0,
        what="Prometheus's passk_scenario_pass_hat_k equal to the topic's",
    )

    # Replayed traffic carries passk ids, so every trial is sampled: the dashboard's
    # sampling panels read the sampled pass^k equal to pass^k, n_sampled equal to n, and
    # no LLM judge call saved (tests/e2e/test_production.py and make demo show sampling).
    def sampled_agree() -> tuple[bool, object]:
        got = {
            q: {
                r["metric"]["scenario"]: float(r["value"][1])
                for r in monitoring.query(f'{q}{{window="1h"}}')
            }
            for q in (
                "passk_scenario_sampled_pass_hat_k",
                "passk_scenario_sampled_trials",
                "passk_scenario_llm_judge_calls_saved",
            )
        }
        want = {
            "passk_scenario_sampled_pass_hat_k": {
                sid: float(r["pass_hat_k"]) for sid, r in on_topic.items()
            },
            "passk_scenario_sampled_trials": {sid: float(TRIALS) for sid in on_topic},
            "passk_scenario_llm_judge_calls_saved": {sid: 0.0 for sid in on_topic},
        }
        return all(
            got[q].keys() == want[q].keys()
            and all(abs(got[q][s] - want[q][s]) < 1e-9 for s in want[q])
            for q in want
        ), got

    wait_seeing(sampled_agree, timeout=120, what="the sampled gauges equal the figures")

    # The drop alert fires for the degrading scenario, and only for it.
    def drop_firing() -> list[dict[str, Any]]:
        return [
            a
            for a in monitoring.alerts()
            if a["labels"]["alertname"] == "PasskScenarioReliabilityDrop" and a["state"] == "firing"
        ]

    firing = wait_for(drop_firing, timeout=180, interval=1.0, what="the drop alert firing")
    assert {a["labels"]["scenario"] for a in firing} == {DEGRADING}
    assert "1h" in {a["labels"]["window"] for a in firing}

    # Alertmanager delivers it to the webhook; the payload names the scenario and pass^k.
    delivered = wait_for(
        lambda: webhook.firing("PasskScenarioReliabilityDrop"),
        timeout=120,
        interval=1.0,
        what="Alertmanager delivering the drop alert",
    )
    assert {a["labels"]["scenario"] for a in delivered} == {DEGRADING}
    hourly = [a for a in delivered if a["labels"]["window"] == "1h"]
    assert hourly, delivered
    figure = f"{float(on_topic[DEGRADING]['pass_hat_k']):.3f}"
    assert DEGRADING in hourly[0]["annotations"]["summary"]
    assert f"pass^k {figure}" in hourly[0]["annotations"]["summary"], hourly[0]

    # Labels stay low-cardinality: no series carries a trial, session or run id.
    series = monitoring.query('{__name__=~"passk_.+"}')
    labels = set().union(*(r["metric"].keys() for r in series))
    assert {"scenario", "processor", "topic"} <= labels
    assert not labels & {"trial", "trial_id", "session", "session_id", "run", "run_id"}, labels
    ids = {t["trial_id"] for e in expected for t in e["trials"]}
    assert not {v for r in series for v in r["metric"].values()} & ids

    # The auditor accounts for every trial sent (the broken record is no trial), and its
    # alert stays quiet.
    sent = sum(len(e["trials"]) for e in expected)

    def audited_clean() -> tuple[bool, dict[str, list[float]]]:
        figures = {
            q: [float(r["value"][1]) for r in monitoring.query(q)]
            for q in (
                "sum(passk_audit_unaccounted_trials)",
                "passk_audit_trials",
                "passk_audit_in_flight_trials",
                "passk_audit_last_clean_timestamp_seconds",
            )
        }
        clean = figures["passk_audit_last_clean_timestamp_seconds"]
        return figures == {
            "sum(passk_audit_unaccounted_trials)": [0.0],
            "passk_audit_trials": [float(sent)],
            "passk_audit_in_flight_trials": [0.0],
            "passk_audit_last_clean_timestamp_seconds": clean,
        } and len(clean) == 1 and clean[0] > began, figures

    wait_seeing(audited_clean, timeout=180, what=f"the auditor clean over all {sent} trials")
    assert not [
        a
        for a in monitoring.alerts()
        if a["labels"]["alertname"] in ("PasskTrialsUnaccounted", "PasskAuditStale")
    ]

    # Every dashboard panel's query returns data from this Prometheus: the sampling
    # panels' among them.
    titles = {title for title, _ in dashboard_queries(build_dashboard())}
    assert {
        "Sampled pass^k beside pass^k over all trials",
        "Sampled trials in the latest window",
        "LLM judge calls saved by sampling",
    } <= titles
    empty = [
        (title, expr)
        for title, expr in dashboard_queries(build_dashboard())
        if not monitoring.query_range(expr, began, time.time())
    ]
    assert not empty, f"panels with no data: {empty}"


def test_a_trial_lost_on_purpose_fires_the_audit_alert_at_the_webhook(
    pipeline: Pipeline, webhook: Webhook, tmp_path: Path
) -> None:
    """The continuous auditor on a live pipeline: clean while every trial is accounted for;
    a projection row deleted by hand (the sink never writes it again) makes that trial
    unaccounted at `projection`, PasskTrialsUnaccounted reaches Alertmanager's webhook,
    and `passk audit --repair` puts the row back, so the alert resolves."""
    run_id, trials = "audit-alert", 3
    # The grace is the pipeline's deadlines, as under `make up` (here 5 s of session wait
    # and 60 s of judge wait, plus 60 s): no trial still being graded is taken for lost.
    # Scrapes every 3 s (each may take that long): a scrape of a busy auditor that timed
    # out at 1 s would mark its series stale and restart the alert's `for:`.
    with (
        pipeline.auditing(PASSK_AUDIT_INTERVAL_S="5", PASSK_AUDIT_PERIOD_S="3600"),
        monitoring_stack(pipeline, webhook, tmp_path, scrape_s=3) as monitoring,
    ):
        _ok(pipeline.passk("scenarios", "publish", str(SCENARIOS)))
        traffic, expected_file = tmp_path / "traffic.jsonl", tmp_path / "expected.json"
        _ok(
            pipeline.passk(
                "generate",
                "--scenarios",
                str(SCENARIOS),
                "--run-id",
                run_id,
                "--out",
                str(traffic),
                "--expected",
                str(expected_file),
                "--trials",
                str(trials),
                "--default-pass-prob",
                "1.0",
                "--quirk-rate",
                "session_missing=0",
                "--seed",
                "29",
            )
        )
        _ok(pipeline.passk("replay", str(traffic)))
        expected = json.loads(expected_file.read_text())
        sent = len(expected["trials"])
        _ok(
            pipeline.passk(
                "wait", "--run-id", run_id, "--expected", str(expected_file), "--timeout", "300"
            )
        )
        pipeline.wait_settled(timeout=300)

        def figure(query: str) -> list[float]:
            return [float(r["value"][1]) for r in monitoring.query(query)]

        # Every trial past its grace and accounted for, by an audit Prometheus scraped.
        def clean() -> tuple[bool, object]:
            seen = (
                figure("passk_audit_trials"),
                figure("passk_audit_in_flight_trials"),
                figure("sum(passk_audit_unaccounted_trials)"),
            )
            return seen == ([float(sent)], [0.0], [0.0]), seen

        wait_seeing(clean, timeout=300, what=f"a clean audit of all {sent} trials, none in flight")
        assert not webhook.firing("PasskTrialsUnaccounted")

        # Lose one on purpose: its projection row goes.
        lost = expected["trials"][0]["trial_id"]
        database = pipeline.settings.database_url.removeprefix("sqlite:///")
        with sqlite3.connect(database) as db:
            assert db.execute("DELETE FROM trials WHERE trial_id = ?", (lost,)).rowcount == 1

        def projection_short() -> tuple[bool, object]:
            found = figure('passk_audit_unaccounted_trials{stage="projection"}')
            return found == [1.0], {
                "found": found,
                "audit took": figure("passk_audit_duration_seconds"),
            }

        wait_seeing(projection_short, timeout=180, what="the auditor finding the projection short")

        def delivered() -> tuple[bool, object]:
            return bool(webhook.firing("PasskTrialsUnaccounted")), {
                "alerts": [(a["labels"]["alertname"], a["state"]) for a in monitoring.alerts()],
                "audit up": figure('up{job="passk-audit"}'),
                "projection": figure('passk_audit_unaccounted_trials{stage="projection"}'),
            }

        wait_seeing(delivered, timeout=180, what="Alertmanager delivering PasskTrialsUnaccounted")
        firing = webhook.firing("PasskTrialsUnaccounted")
        assert {a["labels"]["stage"] for a in firing} == {"projection"}
        assert firing[0]["labels"]["severity"] == "page"
        assert firing[0]["annotations"]["summary"] == (
            "1 trials unaccounted past their deadlines, stopped at projection"
        )

        # What the operator does (docs/operations.md): the audit names the trial, the
        # repair puts its row back and audits again, clean.
        found = pipeline.passk("audit", "--since", "1h", "--json")
        assert found.returncode == 1, found.stdout + found.stderr
        report = json.loads(found.stdout)
        assert [(u["trial_id"], u["stopped_at"]) for u in report["unaccounted"]] == [
            (lost, "projection")
        ]
        repaired = pipeline.passk("audit", "--since", "1h", "--repair", "--json")
        assert repaired.returncode == 0, repaired.stdout + repaired.stderr
        assert json.loads(repaired.stdout)["repaired"]["reprojected"] == 1

        def resolved() -> list[dict[str, Any]]:
            return [
                a
                for p in list(webhook.payloads)
                for a in p.get("alerts", [])
                if a["labels"].get("alertname") == "PasskTrialsUnaccounted"
                and a["status"] == "resolved"
            ]

        wait_for(
            resolved,
            timeout=180,
            interval=1.0,
            what="Alertmanager delivering PasskTrialsUnaccounted resolved",
        )
        wait_seeing(clean, timeout=120, what="the auditor clean again after the repair")
