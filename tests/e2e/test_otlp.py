"""Traces in, evaluations out, end to end. An agent on the official openai client,
instrumented by opentelemetry-instrumentation-openai-v2, exports its traces with the OTel
SDK's OTLP exporter to `passk worker otlp`; the same agent's traces are also written to
files and imported; and the same conversations are sent as plain input events. Every
trial is graded the same three ways; spans sent again publish nothing twice; hostile
requests are refused or bounded and counted; the verdicts come back as
gen_ai.evaluation.result events carrying the original trace ids."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests

from schemas.events import ConversationFinished, Message, SessionPersisted
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.kafka.producer import TrafficProducer
from tests.e2e.conftest import free_port, running_pipeline
from tests.otel_agent import Agent, Trial, chat_server
from tests.otlp_sink import log_sink
from tests.support import read_topic, wait_for
from tests.unit.otlp.spans import otlp_json

pytestmark = pytest.mark.e2e
SCENARIO = "otel-debrief"
TOKEN = "e2e-token"
STATE_OK = {"report": {"fault": "seized drain pump", "parts": ["PUMP-7"]}}
# (user lines, exit, state): a pass, a judge failure, a state failure, an exit failure
CASES = [
    (["Hi, job 4112.", "Drain pump seized; replaced it."], "product_closed", STATE_OK),
    (["Hi, job 4112.", "Replaced the pump [[fail:covered_topics]]"], "product_closed", STATE_OK),
    (["Hi, job 4112.", "Replaced the pump."], "product_closed", {"report": {"parts": ["P"]}}),
    (["Hi, job 4112.", "Gotta go."], "handed_off", STATE_OK),
]
SCENARIO_YAML = f"""
id: {SCENARIO}
description: A debrief graded from its OpenTelemetry trace.
trials: 4
expected_exit: product_closed
limits: {{max_turns: 30}}
outcome:
  - {{path: report.fault, present: true}}
  - {{path: report.parts, present: true}}
judges:
  - id: covered_topics
    assertion: "The agent covered the fault and the parts."
"""


def _trials(run_id: str) -> list[Trial]:
    return [
        Trial(
            run_id,
            SCENARIO,
            f"{run_id}:{SCENARIO}:{i:03d}",
            f"{run_id}-session-{i}",
            lines,
            exit_reason,
            state,
        )
        for i, (lines, exit_reason, state) in enumerate(CASES, 1)
    ]


def _collector_lines(spans: list[Any]) -> str:
    """OTLP/JSON lines as the Collector's file exporter writes them (hex ids), one export
    per trace, from the SDK's own OTLP encoder."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    lines = []
    for trace_id in sorted({s.context.trace_id for s in spans}):
        tree = otlp_json(encode_spans([s for s in spans if s.context.trace_id == trace_id]))
        lines.append(json.dumps(tree))
    return "\n".join(lines) + "\n"


def _report(p, run_id: str) -> dict[str, tuple[str, tuple[str, ...]]]:  # type: ignore[no-untyped-def]
    out = p.passk("report", "--run-id", run_id, "--json")
    assert out.returncode == 0, out.stderr
    return {
        t["trial_id"].rsplit(":", 1)[1]: (
            t["outcome"],
            tuple(sorted(c["check"] for c in t["failed_checks"])),
        )
        for t in json.loads(out.stdout)["trials"]
    }


def _metric(port: int, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    want = name + (
        "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else ""
    )
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return 0.0


def _wait_graded(p, run_id: str, n: int) -> dict[str, tuple[str, tuple[str, ...]]]:  # type: ignore[no-untyped-def]
    box: dict[str, Any] = {}

    def done() -> bool:
        box["r"] = _report(p, run_id)
        return len(box["r"]) == n

    wait_for(done, timeout=180, interval=2.0, what=f"{n} trials of {run_id} graded")
    return box["r"]


def test_traces_in_evaluations_out(settings: Settings, tmp_path: Path) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    otlp_port, metrics_port, chat_port, sink_port = (free_port() for _ in range(4))
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / f"{SCENARIO}.yaml").write_text(SCENARIO_YAML)
    with (
        log_sink(sink_port, fail_first=3) as sink,
        chat_server(chat_port) as chat_url,
        running_pipeline(settings, tmp_path, ["gate", "judge", "verdict", "sink"]) as p,
    ):
        assert p.passk("scenarios", "publish", str(scenarios)).returncode == 0
        p.start(
            "otlp",
            "worker",
            "otlp",
            env={
                "PASSK_OTLP_PORT": str(otlp_port),
                "PASSK_METRICS_PORT": str(metrics_port),
                "PASSK_OTLP_TOKEN": TOKEN,
                "PASSK_OTLP_MAX_PENDING_TRACES": "1000",
                "PASSK_OTLP_IDLE_S": "3",
                "PASSK_OTLP_MAX_BODY_BYTES": "4000000",
                "PASSK_OTLP_EXPORT_ENDPOINT": f"http://127.0.0.1:{sink_port}",
                "PASSK_OTLP_EXPORT_TIMEOUT_S": "2",
            },
        )
        url = f"http://127.0.0.1:{otlp_port}/v1/traces"
        pb = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TOKEN}"}

        def up() -> bool:
            try:
                return requests.post(url, data=b"", headers=pb, timeout=2).status_code == 200
            except requests.ConnectionError:
                return False

        wait_for(up, timeout=60, interval=0.5, what="otlp receiver up")

        # ---- hostile input first: each refused or bounded, and counted
        assert requests.post(url, data=b"\0" * 50_000_000, headers=pb).status_code == 413
        assert requests.post(url, data=b"\x0a\xff\xff\xff\xff\x0f", headers=pb).status_code == 400
        wrong = {**pb, "Authorization": "Bearer guess"}
        assert requests.post(url, data=b"", headers=wrong).status_code == 401
        assert (
            requests.post(url, data=b"", headers={"Content-Type": pb["Content-Type"]}).status_code
            == 401
        )
        from tests.unit.otlp.spans import request as make_request
        from tests.unit.otlp.spans import span

        never_ends = make_request(span(7, 2, 1, "chat", {"gen_ai.operation.name": "chat"}))
        assert requests.post(url, data=never_ends.SerializeToString(), headers=pb).ok
        wait_for(
            lambda: _metric(metrics_port, "passk_otlp_traces_dropped_total", reason="idle") >= 1,
            timeout=30,
            interval=0.5,
            what="the never-ending trace dropped once idle",
        )
        for batch in range(10):  # 100,000 open traces
            flood = make_request(
                *(span(1 << 64 | batch * 10_000 + i, 2, 1, "chat", {}) for i in range(10_000))
            )
            assert requests.post(url, data=flood.SerializeToString(), headers=pb).ok
        assert _metric(metrics_port, "passk_otlp_pending_traces") <= 1000
        # each flood trace past the bound is dropped: evicted, or expired idle (3 s) when
        # the flood takes longer than that on a loaded machine
        assert (
            sum(
                _metric(metrics_port, "passk_otlp_traces_dropped_total", reason=why)
                for why in ("too_many_pending_traces", "idle")
            )
            >= 99_000
        )
        assert (
            _metric(metrics_port, "passk_otlp_requests_rejected_total", reason="unauthorized") == 2
        )
        assert _metric(metrics_port, "passk_otlp_requests_rejected_total", reason="too_large") == 1
        assert _metric(metrics_port, "passk_otlp_requests_rejected_total", reason="malformed") == 1

        # ---- run A: live over OTLP/HTTP, spans exported one by one as they end
        memory = InMemorySpanExporter()
        live = OTLPSpanExporter(endpoint=url, headers={"Authorization": f"Bearer {TOKEN}"})
        agent = Agent(chat_url, [live, memory])
        transcripts = {t.trial_id: agent.run(t) for t in _trials("otel-live")}
        live_spans = list(memory.get_finished_spans())
        by_live = _wait_graded(p, "otel-live", len(CASES))

        # ---- run B: the same conversations as plain input events
        with TrafficProducer(p.settings) as producer:
            for t in _trials("otel-plain"):
                kept = transcripts[t.trial_id.replace("otel-plain", "otel-live")]
                producer.send(
                    ConversationFinished(
                        event_id=f"plain-{t.trial_id}",
                        run_id=t.run_id,
                        scenario_id=SCENARIO,
                        trial_id=t.trial_id,
                        session_id=t.session_id,
                        exit_reason=t.exit_reason,
                        transcript=[Message.model_validate(m) for m in kept],
                    )
                )
                producer.send(
                    SessionPersisted(
                        event_id=f"plain-s-{t.trial_id}",
                        session_id=t.session_id,
                        state=t.state or {},
                        exit_reason=t.exit_reason,
                        trial_id=t.trial_id,
                    )
                )
        by_plain = _wait_graded(p, "otel-plain", len(CASES))

        # ---- run C: written to files (Collector JSON lines, OTLP protobuf) and imported
        memory.clear()
        file_agent = Agent(chat_url, [memory])
        for t in _trials("otel-file"):
            file_agent.run(t)
        file_spans = list(memory.get_finished_spans())
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        half = {s.context.trace_id for s in file_spans}
        first = sorted(half)[:2]
        jsonl, binpb = tmp_path / "traces.jsonl", tmp_path / "traces.binpb"
        jsonl.write_text(_collector_lines([s for s in file_spans if s.context.trace_id in first]))
        binpb.write_bytes(
            encode_spans(
                [s for s in file_spans if s.context.trace_id not in first]
            ).SerializeToString()
        )
        dry = p.passk("import", "otel", str(jsonl), str(binpb), "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        planned = json.loads(dry.stdout)
        assert (
            planned["dry_run"],
            planned["spans"],
            planned["taken"],
            planned["skipped"],
            planned["acknowledged"],
        ) == (True, len(file_spans), len(CASES), {}, None), planned
        imported = p.passk("import", "otel", str(jsonl), str(binpb))
        assert imported.returncode == 0, imported.stdout + imported.stderr
        by_file = _wait_graded(p, "otel-file", len(CASES))

        # ---- each trial graded exactly as the plain events were
        assert by_live == by_plain == by_file, (by_live, by_plain, by_file)
        # and the cases really differ: a pass, a judge, the state gate, the exit gate
        assert by_live["001"] == ("passed", ())
        assert [o for o, _ in by_live.values()].count("failed") == 3
        assert any("covered_topics" in c for c in by_live["002"][1])

        # ---- the same spans again (live and imported): nothing published twice
        assert live.export(live_spans).name == "SUCCESS"
        again = p.passk("import", "otel", str(jsonl), str(binpb))
        assert again.returncode == 0
        assert _metric(metrics_port, "passk_otlp_spans_repeated_total") >= len(live_spans)
        assert _metric(metrics_port, "passk_otlp_traces_completed_total") == len(CASES)
        p.wait_settled(processors=["gate", "judge", "verdict", "sink"])
        live_cf = [
            v
            for _, v, _ in read_topic(p.settings, Topic.CONVERSATION_FINISHED)
            if v["run_id"] == "otel-live"
        ]
        assert Counter(v["trial_id"] for v in live_cf) == Counter(
            t.trial_id for t in _trials("otel-live")
        )
        # one verdict per trial (a redelivery would carry the same event id)
        verdicts: dict[str, set[str]] = {}
        for _, v, _ in read_topic(p.settings, Topic.TRIAL_VERDICTS):
            verdicts.setdefault(v["trial_id"], set()).add(v["event_id"])
        assert len(verdicts) == 3 * len(CASES)
        assert all(len(ids) == 1 for ids in verdicts.values()), verdicts

        # ---- evaluations out, through an endpoint outage, with the original trace ids
        roots = {
            s.attributes["passk.trial_id"]: (
                f"{s.context.trace_id:032x}",
                f"{s.context.span_id:016x}",
            )
            for s in live_spans
            if s.parent is None
        }

        def trial_evaluations() -> dict[str, dict[str, Any]]:
            return {
                r["attributes"]["passk.trial_id"]: r
                for r in sink.snapshot()
                if r["attributes"]["gen_ai.evaluation.name"] == "passk.trial"
            }

        wait_for(
            lambda: len(trial_evaluations()) == 3 * len(CASES),
            timeout=120,
            interval=1.0,
            what="every trial verdict exported",
        )
        got = trial_evaluations()
        assert sink.refused == 3
        for trial_id, (trace_id, span_id) in roots.items():
            e = got[trial_id]
            assert e["event_name"] == "gen_ai.evaluation.result"
            assert (e["trace_id"], e["span_id"]) == (trace_id, span_id)
            want = {"passed": "pass", "failed": "fail"}[by_live[trial_id.rsplit(":", 1)[1]][0]]
            assert e["attributes"]["gen_ai.evaluation.score.label"] == want
        for trial_id, e in got.items():
            if trial_id.startswith("otel-plain"):
                assert set(e["trace_id"]) <= {"0"}
        names = Counter(
            r["attributes"]["gen_ai.evaluation.name"]
            for r in sink.snapshot()
            if r["attributes"]["passk.trial_id"] in roots
        )
        assert names["gate:exit"] >= 4 and names["gate:state"] >= 4
        assert names["judge:covered_topics"] >= 4
