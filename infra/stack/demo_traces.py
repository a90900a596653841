"""The continuous half of `make demo` sends production traffic the way a production service
does: plain OpenTelemetry GenAI traces, through the OTLP receiver (`passk worker otlp`).

A support agent on the official openai client, instrumented by
opentelemetry-instrumentation-openai-v2 (message content captured on the spans), talks to a
small local chat model; each conversation is an `invoke_agent` span carrying only what a
service sets itself (`gen_ai.*`, `session.id`, `app.intent`, `app.exit_reason`; the
resource's `service.name`). No passk id, no passk attribute: the receiver routes each trace
by the `match:` rules of examples/production/ and the LLM judge of `support-refunds` runs on
its sample only (`sampling: {llm_judges: 0.5}`).

The traces are recorded now and sent with their times moved into the hour they stand for
(the past hours, and the current hour up to now), so a few minutes of demo make hours of
event time. In the last hour one scenario degrades: its agent now re-asks answered
questions in most conversations (the stand-in judge fails `avoided_repetition` on the
marker `[[fail:avoided_repetition]]` in the transcript); only the sampled ones are judged,
so only they can fail.

`send`  records and sends the traffic, writes the plan (every trace id, its scenario, run
        id, hour, whether it is in the sample, the outcome it must get), waits until every
        trace has its verdict in the projection, and exits 1 if any outcome differs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# Read when the instrumentation starts: set before it is imported (docs/otel.md).
os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")

SERVICE = "field-support-agent"
REFUNDS, GENERAL = "support-refunds", "support-general"
FAIL_MARKER = "[[fail:avoided_repetition]]"


@dataclass
class Planned:
    trial_id: str  # the trace id
    scenario_id: str
    run_id: str
    hour: str  # the 1h window's start, RFC 3339
    sampled: bool
    expected_outcome: str
    intent: str
    repeats_question: bool


@contextmanager
def chat_model() -> Iterator[str]:
    """The agent's model: a local OpenAI-compatible server that notes what it is told."""
    from aiohttp import web

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        text = body["messages"][-1].get("content") or ""
        return web.json_response({
            "id": "chatcmpl-demo", "object": "chat.completion", "created": 0,
            "model": body.get("model", "support-model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": f"Noted: {text}"}}],
            "usage": {"prompt_tokens": 12 * len(body["messages"]), "completion_tokens": 9,
                      "total_tokens": 12 * len(body["messages"]) + 9}})

    import asyncio

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def in_sample(trial_id: str, rate: float) -> bool:
    """The contract's sample (docs/production.md, section 4)."""
    from services.grading.sampling import in_sample as contract

    return contract(trial_id, rate)


Recorded = tuple[list[Planned], dict[str, int], dict[str, list[Any]]]


def record(args: argparse.Namespace, model_url: str) -> Recorded:
    """Runs every conversation now; returns the plan, each trace's event time (ns) and its
    spans."""
    from openai import OpenAI
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    rng = random.Random(f"{args.seed}:{args.nonce}")
    provider = TracerProvider(resource=Resource.create(
        {"service.name": SERVICE, "service.version": "support-2.3"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("passk.demo.support_agent")
    client = OpenAI(base_url=model_url, api_key="demo", max_retries=0)

    now = time.time()
    hour_now = args.hour_start or int(now // 3600) * 3600
    plan: list[Planned] = []
    at_ns: dict[str, int] = {}
    for i in range(args.hours):
        start = hour_now - (args.hours - 1 - i) * 3600
        last = i == args.hours - 1
        span_s = min(max(now - start - 2, 1), 3500) if last else 3000  # the current hour: up to now
        convs = [(REFUNDS, "refund" if j % 2 else "return") for j in range(args.refunds)] + [
            (GENERAL, "order-status") for _ in range(args.general)]
        for j, (scenario, intent) in enumerate(convs):
            repeats = last and scenario == args.degrading and rng.random() > args.degraded_pass
            attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                     "app.intent": intent, "session.id": f"{args.nonce}-{i}-{j}"}
            with tracer.start_as_current_span("invoke_agent support", kind=SpanKind.INTERNAL,
                                              attributes=attrs) as root:
                trace_id = f"{root.get_span_context().trace_id:032x}"
                messages: list[dict[str, Any]] = [
                    {"role": "system", "content": "You are the field support agent."}]
                lines = [f"I need help with a {intent} for order {4000 + j}.",
                         "It was delivered last week." + (f" {FAIL_MARKER}" if repeats else "")]
                for line in lines:
                    messages.append({"role": "user", "content": line})
                    reply = client.chat.completions.create(model="support-model",
                                                           messages=messages)  # type: ignore[arg-type]
                    messages.append({"role": "assistant",
                                     "content": reply.choices[0].message.content})
                root.set_attribute("app.exit_reason", "resolved")
            event_s = start + 60 + (span_s - 60) * (j + 1) / (len(convs) + 1) if not last \
                else start + span_s * (j + 1) / (len(convs) + 1)
            at_ns[trace_id] = int(event_s * 1e9)
            rate = args.rate if scenario == REFUNDS else 1.0
            sampled = in_sample(trace_id, rate)
            day = time.strftime("%Y-%m-%d", time.gmtime(event_s))
            plan.append(Planned(
                trial_id=trace_id, scenario_id=scenario, run_id=f"production-{day}",
                hour=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)), sampled=sampled,
                expected_outcome="failed" if repeats and sampled else "passed", intent=intent,
                repeats_question=repeats))
    provider.force_flush()
    spans = list(memory.get_finished_spans())
    OpenAIInstrumentor().uninstrument()
    provider.shutdown()
    by_trace: dict[str, list[Any]] = {}
    for span in spans:
        by_trace.setdefault(f"{span.context.trace_id:032x}", []).append(span)
    return plan, at_ns, by_trace


def send(url: str, at_ns: dict[str, int], by_trace: dict[str, list[Any]],
         token: str | None, patience_s: float = 240.0) -> int:
    """Each trace as one OTLP/HTTP protobuf request, its times moved so that its root span
    ends at the trace's event time. A trace the receiver answers as rejected (OTLP partial
    success: until its scenario catalog has read examples/production, a plain trace matches
    no scenario and is dead-lettered) is sent again a little later, within `patience_s`.
    Returns how many sends were rejected."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    deadline = time.monotonic() + patience_s
    rejected = 0
    for trace_id, spans in by_trace.items():
        request = encode_spans(spans)
        root_end = max(s.end_time or 0 for s in spans if s.parent is None)
        delta = at_ns[trace_id] - root_end
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    span.start_time_unix_nano += delta
                    span.end_time_unix_nano += delta
                    for event in span.events:
                        event.time_unix_nano += delta
        headers = {"Content-Type": "application/x-protobuf"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        body = request.SerializeToString()
        while True:
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=10) as answer:
                    said = ExportTraceServiceResponse.FromString(answer.read())
                if not said.partial_success.rejected_spans:
                    break
                why = said.partial_success.error_message
            except OSError as exc:  # not up yet, or 503 past its in-flight bound
                why = str(exc)
            rejected += 1
            if time.monotonic() > deadline:
                raise SystemExit(f"demo: the OTLP receiver at {url} did not take trace "
                                 f"{trace_id}: {why}")
            if rejected == 1:
                print(f"  the receiver did not take trace {trace_id} ({why[:200]}); is its "
                      "scenario catalog behind? sending it again", flush=True)
            time.sleep(2.0)
    return rejected


def await_verdicts(plan: list[Planned], timeout: float) -> dict[str, str]:
    from services.contract.settings import get_settings
    from services.storage.store import Store

    store = Store(get_settings().database_url)
    wanted = {p.trial_id for p in plan}
    deadline = time.monotonic() + timeout
    outcomes: dict[str, str] = {}
    try:
        while True:
            if store.has_schema():
                for run_id in sorted({p.run_id for p in plan}):
                    outcomes.update({t.trial_id: t.outcome for t in store.trials(run_id)
                                     if t.trial_id in wanted})
            if len(outcomes) == len(wanted) or time.monotonic() > deadline:
                return outcomes
            time.sleep(1.0)
    finally:
        store.close()


def dead_letters() -> dict[str, str]:
    """Each trace id `passk dead-letters` lists, with its reason: why a trace was not taken."""
    import subprocess

    done = subprocess.run([str(ROOT / ".venv" / "bin" / "passk"), "dead-letters", "--json",
                           "--since", "2h"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return {}
    return {d["key"]: f"{d['reason']}: {d.get('excerpt', '')}"[:200]
            for d in json.loads(done.stdout).get("dead_letters", []) if d.get("key")}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="demo_traces")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("send")
    s.add_argument("--url", required=True, help="the receiver's /v1/traces")
    s.add_argument("--plan", required=True, type=Path, help="write the plan here (JSON)")
    s.add_argument("--hours", type=int, default=4)
    s.add_argument("--hour-start", type=int, default=0,
                   help="the current hour's start (epoch s; default: now's)")
    s.add_argument("--refunds", type=int, default=24, help="support-refunds traces per hour")
    s.add_argument("--general", type=int, default=6, help="support-general traces per hour")
    s.add_argument("--rate", type=float, default=0.5, help="support-refunds' sampling rate")
    s.add_argument("--degrading", default=REFUNDS)
    s.add_argument("--degraded-pass", type=float, default=0.2)
    s.add_argument("--seed", default="7")
    s.add_argument("--nonce", default=str(time.time_ns()), help="makes the trace ids new")
    s.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)

    with chat_model() as model_url:
        plan, at_ns, by_trace = record(args, model_url)
    resent = send(args.url, at_ns, by_trace, os.environ.get("PASSK_OTLP_TOKEN") or None)
    args.plan.write_text(json.dumps({"trials": [asdict(p) for p in plan]}, indent=1))
    for hour in sorted({p.hour for p in plan}):
        mine = [p for p in plan if p.hour == hour]
        by = {sid: [p for p in mine if p.scenario_id == sid] for sid in (REFUNDS, GENERAL)}
        said = []
        for sid, ps in by.items():
            repeats = sum(p.repeats_question for p in ps)
            said.append(f"{sid} {len(ps)} traces ({sum(p.sampled for p in ps)} in the LLM-judge "
                        f"sample{f', {repeats} re-ask an answered question' if repeats else ''})")
        print(f"  hour {hour}: " + "; ".join(said))
    print(f"  sent {len(plan)} plain GenAI traces to {args.url} (no passk ids"
          + (f"; {resent} sends rejected and made again, each a dead letter: passk "
             "dead-letters" if resent else "") + "); waiting for their verdicts")
    outcomes = await_verdicts(plan, args.timeout)
    wrong = [(p.trial_id, p.expected_outcome, outcomes.get(p.trial_id, "missing"))
             for p in plan if outcomes.get(p.trial_id) != p.expected_outcome]
    if wrong:
        letters = dead_letters()
        for trial_id, want, got in wrong[:10]:
            note = f" (dead letter: {letters[trial_id]})" if trial_id in letters else ""
            print(f"demo: trace {trial_id}: expected {want}, got {got}{note}")
        print(f"demo: {len(wrong)} of {len(plan)} traces did not get their expected outcome")
        return 1
    runs = ", ".join(sorted({p.run_id for p in plan}))
    print(f"  all {len(plan)} traces graded as planned (run {runs}); a re-asking trace outside "
          "the sample passed: its LLM judge was not_sampled")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
