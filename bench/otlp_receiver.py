"""The OTLP receiver's throughput: agent traces (written by the official openai-v2
instrumentation, then copied under new trace and trial ids) POSTed over HTTP to the
receiver, which holds them, maps them and publishes each trial to the real broker,
answering once the broker acknowledged; against a plain loop that only decodes the same
OTLP payloads (protobuf parse), in the same run.

Not a test: it prints spans/s and traces/s for both, and their ratio. Then production
traffic (issue 30): the same traces with no passk attribute at all, taken by a scenario's
`match` rule with `sampling: {llm_judges: 0.1}`, against the traces carrying passk ids,
through the receiver in the same run (ratio); and the LLM calls per 1,000 production
trials the judge's own path (Grader.grade, a counting model client) makes at rates 1.0
and 0.1.

    .venv/bin/python bench/otlp_receiver.py [--traces 3000] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from prometheus_client import CollectorRegistry  # noqa: E402

from services.contract.settings import Settings  # noqa: E402
from services.kafka.admin import create_topics  # noqa: E402
from services.kafka.producer import TrafficProducer  # noqa: E402
from services.otlp.mapping import spans_of  # noqa: E402
from services.otlp.metrics import OtlpMetrics  # noqa: E402
from services.otlp.publish import KafkaPublisher  # noqa: E402
from services.otlp.receiver import Receiver, make_app  # noqa: E402
from services.otlp.settings import OtlpSettings  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent_payloads(
    traces: int, per_request: int, *, plain: bool = False, stateless: bool = False
) -> tuple[list[bytes], int]:
    """`per_request` traces in each request (1: a SimpleSpanProcessor-like client flushing
    per trace; 64: a BatchSpanProcessor's batch)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.otel_agent import Agent, Trial, chat_server

    memory = InMemorySpanExporter()
    with chat_server(_port()) as url:
        agent = Agent(url, [memory])
        agent.run(
            Trial(
                "bench",
                "otel-bench",
                "bench:otel-bench:000",
                "bench-s",
                ["Hi, job 4112.", "Replaced the pump."],
                state={"report": {"x": 1}},
            )
        )
    template = encode_spans(memory.get_finished_spans())
    spans_per_trace = len(list(spans_of(template)))
    bodies = []
    batch = ExportTraceServiceRequest()
    for i in range(traces):
        copy = ExportTraceServiceRequest()
        copy.CopyFrom(template)
        trace_id = uuid.uuid4().bytes
        for rs in copy.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    s.trace_id = trace_id
                    if plain or stateless:
                        # plain: a production service's trace, none of passk's attributes;
                        # stateless: passk's ids kept, no state (one event per trace, as plain)
                        kept = [
                            kv
                            for kv in s.attributes
                            if not (
                                kv.key.startswith("passk.")
                                if plain
                                else kv.key == "passk.session.state"
                            )
                        ]
                        del s.attributes[:]
                        s.attributes.extend(kept)
                    for kv in s.attributes:
                        if kv.key == "passk.trial_id":
                            kv.value.string_value = f"bench:otel-bench:{i:06d}"
                        elif kv.key == "session.id":
                            kv.value.string_value = f"bench-s-{i}"
        batch.resource_spans.extend(copy.resource_spans)
        if (i + 1) % per_request == 0 or i + 1 == traces:
            bodies.append(batch.SerializeToString())
            batch = ExportTraceServiceRequest()
    return bodies, spans_per_trace


def plain_loop(bodies: list[bytes]) -> float:
    start = time.perf_counter()
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
    return time.perf_counter() - start


async def through_receiver(
    bodies: list[bytes],
    traces: int,
    settings: Settings,
    concurrency: int,
    scenarios: list[Any] | None = None,
) -> float:
    import aiohttp
    from aiohttp import web

    otlp = OtlpSettings(PASSK_OTLP_MAX_PENDING_TRACES=traces + 1)
    producer = TrafficProducer(settings)
    metrics = OtlpMetrics(CollectorRegistry())
    receiver = Receiver(
        otlp,
        KafkaPublisher(lambda: producer, 60),
        metrics,
        scenarios=None if scenarios is None else (lambda: scenarios),
    )
    runner = web.AppRunner(make_app(receiver), access_log=None)
    await runner.setup()
    port = _port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}/v1/traces"
    queue = list(reversed(bodies))
    headers = {"Content-Type": "application/x-protobuf"}

    async def client(session: aiohttp.ClientSession) -> None:
        while queue:
            body = queue.pop()
            async with session.post(url, data=body, headers=headers) as answer:
                assert answer.status == 200, answer.status

    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    await runner.cleanup()
    producer.close(30)
    completed = metrics.traces_completed._value.get()  # the bench's own registry
    assert completed == traces, f"{completed} of {traces} traces published"
    events = sum(producer.acked.values())
    assert events in (traces, 2 * traces), events  # a trial, with its session when stated
    assert not producer.report().undelivered
    return elapsed


PRODUCTION = {
    "id": "bench-prod",
    "expected_exit": "product_closed",
    "completion": "conversation",
    "match": {"service.name": "field-debrief-agent"},
    "sampling": {"llm_judges": 0.1},
    "judges": [
        {"id": "covered", "assertion": "The agent covered the fault."},
        {"id": "polite", "assertion": "The agent stayed polite."},
    ],
}


def production(args: argparse.Namespace, settings: Settings) -> None:
    from schemas.scenario import Scenario

    scenario = Scenario.model_validate(PRODUCTION).versioned()
    print(
        f"\nproduction traffic: {args.traces} plain GenAI traces taken by a match rule "
        "(sampling.llm_judges 0.1) vs the same traces with passk ids, same run"
    )
    for per_request in (1, 64):
        # Both publish one event per trace (no persisted state): the difference is the rules.
        with_ids, per_trace = agent_payloads(args.traces, per_request, stateless=True)
        plain, _ = agent_payloads(args.traces, per_request, plain=True)
        ids_s = asyncio.run(through_receiver(with_ids, args.traces, settings, args.concurrency))
        rules_s = asyncio.run(
            through_receiver(plain, args.traces, settings, args.concurrency, [scenario])
        )
        print(
            f"  {per_request:3d} trace(s)/request: plain + rules {args.traces / rules_s:7.0f} "
            f"traces/s | passk ids {args.traces / ids_s:7.0f} traces/s | "
            f"plain/ids throughput {ids_s / rules_s:5.2f}"
        )
    for rate in (1.0, 0.1):
        calls = asyncio.run(llm_calls(scenario, rate, 1000))
        print(
            f"  LLM judge calls per 1,000 production trials at llm_judges {rate:g}: "
            f"{calls} ({len(scenario.judges)} LLM judges per trial)"
        )


async def llm_calls(scenario: Any, rate: float, trials: int) -> int:
    """The model calls the judge's own grading path makes for `trials` production trials."""
    from schemas.events import ConversationFinished, Message
    from services.judge.domain import CallResult
    from services.judge.grading import Grader
    from services.judge.prompt import Answer

    class Counting:
        calls = 0

        async def judge(self, judge_id: str, assertion: str, transcript: Any) -> CallResult:
            Counting.calls += 1
            return CallResult(Answer(passed=True, reason="ok"), None, "", 1, 1.0, 100, 5, "bench")

    grader = Grader(client=Counting(), cache=None, model="bench")  # type: ignore[arg-type]
    at_rate = scenario.model_copy(
        update={"sampling": scenario.sampling.model_copy(update={"llm_judges": rate})}
    )
    for _ in range(trials):
        trial_id = uuid.uuid4().hex
        await grader.grade(
            ConversationFinished(
                event_id=trial_id,
                run_id="production-bench",
                scenario_id=scenario.id,
                trial_id=trial_id,
                session_id=trial_id,
                exit_reason="product_closed",
                transcript=[Message(role="user", content="hi")],
                production=True,
            ),
            at_rate,
        )
    return Counting.calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--traces", type=int, default=int(os.environ.get("PASSK_BENCH_OTLP_TRACES", "3000"))
    )
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    settings = Settings(PASSK_TOPIC_PREFIX=f"bench-otlp-{uuid.uuid4().hex[:8]}.")  # type: ignore[call-arg]
    create_topics(settings)
    print(
        f"\notlp receiver: {args.traces} agent traces, {args.concurrency} concurrent HTTP "
        "clients, real broker (acks=all), against a loop decoding the same payloads"
    )
    try:
        for per_request in (1, 64):
            bodies, per_trace = agent_payloads(args.traces, per_request)
            plain = min(plain_loop(bodies) for _ in range(3))
            receiver = asyncio.run(
                through_receiver(bodies, args.traces, settings, args.concurrency)
            )
            spans = args.traces * per_trace
            print(
                f"  {per_request:3d} trace(s)/request ({per_trace} spans each): receiver -> "
                f"published {spans / receiver:8.0f} spans/s {args.traces / receiver:7.0f} "
                f"traces/s | plain decode {spans / plain:9.0f} spans/s "
                f"{args.traces / plain:8.0f} traces/s | receiver/plain time "
                f"{receiver / plain:6.1f}x"
            )
        production(args, settings)
    finally:
        from tests.support import delete_topics_with_prefix

        delete_topics_with_prefix(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
