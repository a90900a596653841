"""The OTLP receiver's throughput: agent traces (written by the official openai-v2
instrumentation, then copied under new trace and trial ids) POSTed over HTTP to the
receiver, which holds them, maps them and publishes each trial to the real broker,
answering once the broker acknowledged; against a plain loop that only decodes the same
OTLP payloads (protobuf parse), in the same run.

Not a test: it prints spans/s and traces/s for both, and their ratio.

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


def agent_payloads(traces: int, per_request: int) -> tuple[list[bytes], int]:
    """`per_request` traces in each request (1: a SimpleSpanProcessor-like client flushing
    per trace; 64: a BatchSpanProcessor's batch)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.otel_agent import Agent, Trial, chat_server

    memory = InMemorySpanExporter()
    with chat_server(_port()) as url:
        agent = Agent(url, [memory])
        agent.run(Trial("bench", "otel-bench", "bench:otel-bench:000", "bench-s",
                        ["Hi, job 4112.", "Replaced the pump."], state={"report": {"x": 1}}))
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


async def through_receiver(bodies: list[bytes], traces: int, settings: Settings,
                           concurrency: int) -> float:
    import aiohttp
    from aiohttp import web

    otlp = OtlpSettings(PASSK_OTLP_MAX_PENDING_TRACES=traces + 1)
    producer = TrafficProducer(settings)
    metrics = OtlpMetrics(CollectorRegistry())
    receiver = Receiver(otlp, KafkaPublisher(lambda: producer, 60), metrics)
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
    completed = metrics.traces_completed._value.get()  # noqa: SLF001 - the bench's own registry
    assert completed == traces, f"{completed} of {traces} traces published"
    assert sum(producer.acked.values()) == 2 * traces and not producer.failures
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=int(os.environ.get(
        "PASSK_BENCH_OTLP_TRACES", "3000")))
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    settings = Settings(PASSK_TOPIC_PREFIX=f"bench-otlp-{uuid.uuid4().hex[:8]}.")  # type: ignore[call-arg]
    create_topics(settings)
    print(f"\notlp receiver: {args.traces} agent traces, {args.concurrency} concurrent HTTP "
          "clients, real broker (acks=all), against a loop decoding the same payloads")
    try:
        for per_request in (1, 64):
            bodies, per_trace = agent_payloads(args.traces, per_request)
            plain = min(plain_loop(bodies) for _ in range(3))
            receiver = asyncio.run(through_receiver(bodies, args.traces, settings,
                                                    args.concurrency))
            spans = args.traces * per_trace
            print(f"  {per_request:3d} trace(s)/request ({per_trace} spans each): receiver -> "
                  f"published {spans / receiver:8.0f} spans/s {args.traces / receiver:7.0f} "
                  f"traces/s | plain decode {spans / plain:9.0f} spans/s "
                  f"{args.traces / plain:8.0f} traces/s | receiver/plain time "
                  f"{receiver / plain:6.1f}x")
    finally:
        from tests.support import delete_topics_with_prefix

        delete_topics_with_prefix(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
