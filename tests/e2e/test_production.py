"""Production traffic end to end (DESIGN.md, "Production traffic"): an agent on the official
openai client, instrumented by opentelemetry-instrumentation-openai-v2, writes plain GenAI
traces — no passk id, no passk attribute — sent live to `passk worker otlp` and written to
a file for `passk import otel`. Each lands in the scenario its attributes name; the LLM
judge ran on exactly the trials of the contract's hash set (both doors, and a re-import
changes nothing); unmatched traces are dead letters; the window's sampled pass^k equals
the count made here from the sampled trials' outcomes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from hashlib import sha256
from math import comb
from pathlib import Path
from typing import Any

import pytest
import requests

from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.e2e.conftest import free_port, running_pipeline
from tests.otel_agent import Agent, Trial, chat_server
from tests.support import read_topic, wait_for

pytestmark = pytest.mark.e2e
RATE = 0.5
REFUNDS, SUPPORT = "prod-refunds", "prod-support"
SCENARIOS = {
    REFUNDS: f"""
id: {REFUNDS}
trials: 3
expected_exit: resolved
completion: conversation
match: {{service.name: support-agent, app.intent: [refund, return]}}
exit_attribute: app.exit_reason
sampling: {{llm_judges: {RATE}}}
judges:
  - id: polite
    assertion: "The agent stayed polite."
""",
    SUPPORT: f"""
id: {SUPPORT}
trials: 3
expected_exit: resolved
completion: conversation
match: {{service.name: support-agent}}
exit_attribute: app.exit_reason
judges:
  - id: polite
    assertion: "The agent stayed polite."
""",
}


def sampled(trial_id: str) -> bool:
    """The contract's hash, written out here rather than imported."""
    return int(sha256(trial_id.encode("utf-8")).hexdigest()[:8], 16) < RATE * 2**32


def _trials(n: int, intent: str, tag: str) -> list[Trial]:
    """Every third one's judge fails (the stand-in fails `polite` on [[fail:polite]])."""
    out = []
    for i in range(n):
        line = f"{tag} {i}: refund for order {i}" + (" [[fail:polite]]" if i % 3 == 0 else "")
        out.append(
            Trial(
                "",
                "",
                "",
                "",
                [line],
                plain=True,
                attrs={
                    "app.intent": intent,
                    "app.exit_reason": "resolved",
                    "session.id": f"{tag}-session-{i}",
                },
            )
        )
    return out


def _verdicts(p, trial_ids: set[str]) -> dict[str, dict[str, Any]]:  # type: ignore[no-untyped-def]
    return {
        v["trial_id"]: v
        for _, v, _ in read_topic(p.settings, Topic.TRIAL_VERDICTS)
        if v["trial_id"] in trial_ids
    }


def test_plain_traces_become_sampled_production_trials(settings: Settings, tmp_path: Path) -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    otlp_port, metrics_port, chat_port = (free_port() for _ in range(3))
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    for sid, body in SCENARIOS.items():
        (scenarios / f"{sid}.yaml").write_text(body)
    with (
        chat_server(chat_port) as chat_url,
        running_pipeline(
            settings, tmp_path, ["gate", "judge", "verdict", "sink", "aggregate"]
        ) as p,
    ):
        validated = p.passk("scenarios", "validate", str(scenarios))
        assert validated.returncode == 0, validated.stdout + validated.stderr
        assert "match can hold for the same traces" in validated.stdout + validated.stderr
        assert p.passk("scenarios", "publish", str(scenarios)).returncode == 0
        p.start(
            "otlp",
            "worker",
            "otlp",
            env={"PASSK_OTLP_PORT": str(otlp_port), "PASSK_METRICS_PORT": str(metrics_port)},
        )
        url = f"http://127.0.0.1:{otlp_port}/v1/traces"

        def up() -> bool:
            try:
                return (
                    requests.post(
                        url, data=b"", timeout=2, headers={"Content-Type": "application/x-protobuf"}
                    ).status_code
                    == 200
                )
            except requests.ConnectionError:
                return False

        wait_for(up, timeout=60, interval=0.5, what="otlp receiver up")

        # ---- live: plain traces exported as they end
        memory = InMemorySpanExporter()
        agent = Agent(chat_url, [OTLPSpanExporter(endpoint=url), memory], service="support-agent")
        live: dict[str, str] = {}  # trace id -> scenario expected
        for t in _trials(12, "refund", "live"):
            agent.run(t)
            live[agent.last_trace_id] = REFUNDS
        for t in _trials(3, "other", "live-other"):
            agent.run(t)
            live[agent.last_trace_id] = SUPPORT
        agent.shutdown()
        stranger = Agent(chat_url, [OTLPSpanExporter(endpoint=url)], service="billing-agent")
        stranger.run(_trials(1, "refund", "stranger")[0])
        unmatched = {stranger.last_trace_id}
        stranger.shutdown()

        # ---- a file: the same kind of traces, imported (and imported again)
        memory = InMemorySpanExporter()  # the first one stopped with its agent
        file_agent = Agent(chat_url, [memory], service="support-agent")
        filed: dict[str, str] = {}
        for t in _trials(9, "return", "file"):
            file_agent.run(t)
            filed[file_agent.last_trace_id] = REFUNDS
        pb = tmp_path / "traces.binpb"
        pb.write_bytes(encode_spans(list(memory.get_finished_spans())).SerializeToString())
        file_agent.shutdown()
        for _ in range(2):
            imported = p.passk("import", "otel", str(pb), "--json")
            assert imported.returncode == 0, imported.stdout + imported.stderr
            assert json.loads(imported.stdout)["taken"] == len(filed)

        every = {**live, **filed}
        box: dict[str, Any] = {}

        def graded() -> bool:
            box["v"] = _verdicts(p, set(every))
            return len(box["v"]) == len(every)

        wait_for(graded, timeout=240, interval=2.0, what="every production trial graded")
        verdicts = box["v"]
        day = datetime.now(UTC).date().isoformat()
        for trace_id, scenario in every.items():
            v = verdicts[trace_id]
            assert (v["scenario_id"], v["run_id"]) == (scenario, f"production-{day}"), v
            assert v["sampled"] is (sampled(trace_id) if scenario == REFUNDS else True)

        # ---- the LLM-judged set is exactly the hash set, trial by trial, both doors
        judged = {}
        for _, j, _ in read_topic(p.settings, Topic.JUDGE_VERDICTS):
            if j["trial_id"] in every and j["judge_id"] == "polite":
                judged.setdefault(j["trial_id"], set()).add(j["result"])
        assert set(judged) == set(every)
        for trace_id, results in judged.items():
            run = every[trace_id] == SUPPORT or sampled(trace_id)
            assert ("not_sampled" in results) is (not run), (trace_id, results)
            assert results <= ({"passed", "failed"} if run else {"not_sampled"})
        # one verdict per trial: the re-import published nothing twice
        ids: dict[str, set[str]] = {}
        for _, v, _ in read_topic(p.settings, Topic.TRIAL_VERDICTS):
            if v["trial_id"] in every:
                ids.setdefault(v["trial_id"], set()).add(v["event_id"])
        assert all(len(x) == 1 for x in ids.values())

        # ---- unmatched traces are dead letters
        def listed() -> bool:
            out = p.passk("dead-letters", "--json", "--reason", "no_matching_scenario")
            assert out.returncode == 0, out.stderr
            box["dl"] = json.loads(out.stdout)
            return {d["key"] for d in box["dl"]["dead_letters"]} >= unmatched

        wait_for(listed, timeout=60, interval=1.0, what="the unmatched trace listed")
        assert {d["source"] for d in box["dl"]["dead_letters"]} == {"otlp"}

        # ---- the window's sampled pass^k, counted here from the sampled trials' outcomes
        refunds = [t for t, s in every.items() if s == REFUNDS]
        n_s = sum(1 for t in refunds if sampled(t))
        c_s = sum(1 for t in refunds if sampled(t) and verdicts[t]["outcome"] == "passed")
        assert 0 < n_s < len(refunds)

        def window() -> bool:
            out = p.passk("windows", "--json", "--window", "1d", "--last", "1")
            if out.returncode != 0:
                return False
            rows = [w for w in json.loads(out.stdout)["windows"] if w["scenario_id"] == REFUNDS]
            box["w"] = rows[-1] if rows else None
            return bool(rows) and rows[-1]["n"] == len(refunds)

        wait_for(window, timeout=120, interval=2.0, what="the refunds window complete")
        w = box["w"]
        assert (w["n_sampled"], w["passed_sampled"]) == (n_s, c_s), w
        assert w["pass_hat_k_sampled"] == pytest.approx(comb(c_s, 3) / comb(n_s, 3))
        assert w["passed"] == sum(1 for t in refunds if verdicts[t]["outcome"] == "passed")

        # ---- backfill: the trials the sample left out are judged now; the window follows
        backfill = p.passk(
            "regrade", "--run-id", f"production-{day}", "--sample", "1.0", "--await-verdicts", "180"
        )
        assert backfill.returncode == 0, backfill.stdout + backfill.stderr
        box["v"] = {}

        def regraded() -> bool:
            box["v"] = {t: v for t, v in _verdicts(p, set(refunds)).items()}
            return all(v["sampled"] for v in box["v"].values()) and len(box["v"]) == len(refunds)

        wait_for(regraded, timeout=120, interval=2.0, what="every refund trial sampled now")
        c_all = sum(1 for t in refunds if box["v"][t]["outcome"] == "passed")

        def window_follows() -> bool:
            return window() and box["w"]["n_sampled"] == len(refunds)

        wait_for(window_follows, timeout=120, interval=2.0, what="the window's new figures")
        assert box["w"]["passed_sampled"] == c_all
        assert box["w"]["pass_hat_k_sampled"] == pytest.approx(
            comb(c_all, 3) / comb(len(refunds), 3)
        )
