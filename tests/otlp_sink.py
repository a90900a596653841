"""An OTLP/HTTP logs receiver for tests: records every log record it is sent, and can
play an outage (503 for its first N requests)."""

from __future__ import annotations

import asyncio
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
                        sink.records.append({
                            "event_name": r.event_name, "trace_id": r.trace_id.hex(),
                            "span_id": r.span_id.hex(),
                            "attributes": {kv.key: getattr(kv.value, kv.value.WhichOneof("value"))
                                           for kv in r.attributes}})
        return web.Response(body=ExportLogsServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    loop = asyncio.new_event_loop()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/logs", logs)
    ready = threading.Event()
    runner = web.AppRunner(app, access_log=None)

    def serve() -> None:  # its own loop in its own thread: usable from async tests too
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield sink
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
