"""OTLP/HTTP trace receiver (`POST /v1/traces`, protobuf or JSON, gzip or not): spans are
held until their trace's root span arrives, then the trace is mapped (mapping.py) and
published. Answers follow OTLP/HTTP: 200 with an ExportTraceServiceResponse (partial
success names the rejected spans and why), 400 for a payload that is not OTLP, 401 for a
missing or wrong bearer token, 413 above the body limit, 415 for another content type,
503 (retryable, with Retry-After) while publishing fails.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)

from schemas.scenario import Scenario
from services.otlp.decode import PayloadError, from_body
from services.otlp.mapping import Skipped, Span, Taken, assemble, spans_of
from services.otlp.metrics import OtlpMetrics
from services.otlp.pending import Bounds, Outcome, PendingTraces
from services.otlp.settings import OtlpSettings

log = logging.getLogger("passk.otlp")


class Publisher(Protocol):
    async def publish(self, taken: Taken) -> None:
        """Publish a trial's events; raise when they could not be (the client retries)."""


STATE: web.AppKey[Receiver] = web.AppKey("receiver", object)  # type: ignore[arg-type]


class Receiver:
    def __init__(self, settings: OtlpSettings, publisher: Publisher, metrics: OtlpMetrics,
                 clock: Callable[[], float] = time.monotonic,
                 scenarios: Callable[[], Iterable[Scenario] | None] | None = None) -> None:
        """`scenarios`: the published scenarios now (their `match` rules take traces with no
        passk ids); None, or a call answering None: such traces are skipped."""
        self.settings = settings
        self.scenarios = scenarios
        self.publisher = publisher
        self.metrics = metrics
        self.clock = clock
        self.pending = PendingTraces(Bounds(
            max_pending_traces=settings.max_pending_traces, idle_s=settings.idle_s,
            max_spans_per_trace=settings.max_spans_per_trace,
            seen_traces=settings.seen_traces))

    def _count_drops(self, outcome: Outcome) -> Counter[str]:
        rejected: Counter[str] = Counter()
        for _trace, reason, spans in outcome.dropped:
            if reason == "already_published":
                self.metrics.spans_repeated.inc(spans)
            else:
                self.metrics.traces_dropped.labels(reason).inc()
                rejected[reason] += spans
        return rejected

    def expire(self) -> None:
        self._count_drops(self.pending.expire(self.clock()))
        self.metrics.pending_traces.set(len(self.pending))

    async def accept(self, spans: list[Span]) -> tuple[int, str]:
        """Take one request's spans; returns (rejected spans, why) for the answer. Raises
        when a complete trace could not be published (its spans are held again)."""
        self.metrics.spans_received.inc(len(spans))
        outcome = self.pending.add(spans, self.clock())
        rejected = self._count_drops(outcome)
        failure: BaseException | None = None
        ready: list[tuple[list[Span], Taken]] = []
        rules = self.scenarios() if self.scenarios is not None else None
        rules = list(rules) if rules is not None else None
        for trace in outcome.complete:
            result = assemble(trace, rules)
            if isinstance(result, Skipped):
                self.metrics.traces_skipped.labels(result.reason).inc()
                rejected[f"{result.reason} ({result.detail})"] += len(trace)
            else:
                ready.append((trace, result))
        # A batch's trials wait for the broker together, not one after the other.
        published = await asyncio.gather(*(self.publisher.publish(t) for _, t in ready),
                                          return_exceptions=True)
        for (trace, result), error in zip(ready, published, strict=True):
            if isinstance(error, BaseException):  # the broker is down: keep the spans
                failure = error
                self.pending.forget(result.trace_id)
                # The root comes again with the client's retry; what came before it waits.
                self.pending.add([s for s in trace if not s.is_root], self.clock())
                continue
            self.metrics.traces_completed.inc()
            self.metrics.events_published.labels("conversation_finished").inc()
            if result.session is not None:
                self.metrics.events_published.labels("session_persisted").inc()
        self.metrics.pending_traces.set(len(self.pending))
        if failure is not None:
            raise failure
        why = "; ".join(f"{n} span(s): {r}" for r, n in sorted(rejected.items()))
        return sum(rejected.values()), why

    def authorized(self, request: web.Request) -> bool:
        if self.settings.token is None:
            return True
        want = f"Bearer {self.settings.token.get_secret_value()}".encode()
        got = request.headers.get("Authorization", "").encode()
        return hmac.compare_digest(want, got)


def _answer(request: web.Request, rejected: int, why: str) -> web.Response:
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = why[:4000]
    if request.content_type == "application/json":
        return web.json_response(json_format.MessageToDict(response))
    return web.Response(body=response.SerializeToString(), content_type="application/x-protobuf")


def _refuse(receiver: Receiver, status: int, reason: str, message: str) -> web.Response:
    receiver.metrics.requests_rejected.labels(reason).inc()
    return web.json_response({"code": status, "message": message}, status=status)


async def post_traces(request: web.Request) -> web.Response:
    receiver = request.app[STATE]
    if not receiver.authorized(request):
        return _refuse(receiver, 401, "unauthorized", "missing or wrong bearer token")
    limit = receiver.settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        return _refuse(receiver, 413, "too_large", f"body larger than {limit} bytes")
    try:
        # aiohttp inflates a gzip (or deflate, br) body as it reads, and stops at the
        # limit counted on the inflated bytes: a small bomb is refused like a big body.
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _refuse(receiver, 413, "too_large", f"body larger than {limit} bytes")
    except ContentEncodingError as exc:
        return _refuse(receiver, 400, "malformed", f"bad Content-Encoding: {exc}")
    try:
        payload = from_body(body, request.headers.get("Content-Type", ""))
    except PayloadError as exc:
        if str(exc).startswith("unsupported content type"):
            return _refuse(receiver, 415, "unsupported_media_type", str(exc))
        return _refuse(receiver, 400, "malformed", str(exc))
    try:
        rejected, why = await receiver.accept(list(spans_of(payload)))
    except Exception as exc:
        log.warning("otlp: publishing failed, client asked to retry: %s", exc)
        receiver.metrics.requests_rejected.labels("unavailable").inc()
        return web.json_response({"code": 503, "message": f"publishing failed: {exc}"},
                                 status=503, headers={"Retry-After": "5"})
    return _answer(request, rejected, why)


def make_app(receiver: Receiver,
             extra: Callable[[web.Application], Awaitable[None]] | None = None
             ) -> web.Application:
    # aiohttp stops reading a body (chunked, no Content-Length) past the limit.
    app = web.Application(client_max_size=receiver.settings.max_body_bytes)
    app[STATE] = receiver
    app.router.add_post("/v1/traces", post_traces)

    async def sweeper(app: web.Application):  # type: ignore[no-untyped-def]
        async def loop() -> None:
            while True:
                await asyncio.sleep(min(1.0, receiver.settings.idle_s / 4))
                receiver.expire()

        task = asyncio.create_task(loop())
        yield
        task.cancel()

    app.cleanup_ctx.append(sweeper)
    return app
