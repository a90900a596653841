"""An OTLP/HTTP logs receiver for tests: records every log record it is sent, and can
play an outage (503 for its first N requests)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

from tests.support import serve_in_thread


@dataclass
class LogSink:
    fail_first: int = 0
    requests: int = 0
    refused: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.records)


@contextmanager
def log_sink(port: int, fail_first: int = 0) -> Iterator[LogSink]:
    sink = LogSink(fail_first=fail_first)

    async def logs(request: web.Request) -> web.Response:
        body = await request.read()
        with sink.lock:
            sink.requests += 1
            if sink.requests <= sink.fail_first:
                sink.refused += 1
                return web.Response(status=503, headers={"Retry-After": "1"})
        parsed = ExportLogsServiceRequest.FromString(body)
        with sink.lock:
            for rl in parsed.resource_logs:
                for sl in rl.scope_logs:
                    for r in sl.log_records:
                        sink.records.append(
                            {
                                "event_name": r.event_name,
                                "trace_id": r.trace_id.hex(),
                                "span_id": r.span_id.hex(),
                                "attributes": {
                                    kv.key: getattr(kv.value, kv.value.WhichOneof("value"))
                                    for kv in r.attributes
                                },
                            }
                        )
        return web.Response(
            body=ExportLogsServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/logs", logs)
    with serve_in_thread(app, port):
        yield sink
