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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Protocol

from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)

from schemas.events import DeadLetter
from schemas.scenario import Scenario
from services.otlp.decode import PayloadError, from_body
from services.otlp.dropped import trace_letter
from services.otlp.importer import Probe
from services.otlp.mapping import (
    Skipped,
    Span,
    Taken,
    assemble,
    spans_of,
    with_probed_session,
)
from services.otlp.metrics import OtlpMetrics
from services.otlp.pending import Bounds, Outcome, PendingTraces
from services.otlp.settings import OtlpSettings

log = logging.getLogger("passk.otlp")


class Once:
    """Say a flood once: the first occurrence of each kind is logged, the rest are counted
    and summed up at most once a minute (a hostile client must not fill the disk)."""

    def __init__(
        self,
        logger: logging.Logger,
        every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger, self.every_s, self.clock = logger, every_s, clock
        self._last: dict[str, float] = {}
        self._quiet: Counter[str] = Counter()

    def say(self, kind: str, message: str, *args: object) -> None:
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.every_s:
            self._quiet[kind] += 1
            return
        self._last[kind] = now
        quiet = self._quiet.pop(kind, 0)
        suffix = f" (and {quiet} more like it since)" if quiet else ""
        self.logger.warning(message + suffix, *args)


class Publisher(Protocol):
    async def publish(self, taken: Taken) -> None:
        """Publish a trial's events; raise when they could not be (the client retries)."""

    async def publish_letter(self, letter: DeadLetter) -> None:
        """Publish the dead letter of a trace not taken; raise when it could not be."""


STATE: web.AppKey[Receiver] = web.AppKey("receiver", object)  # type: ignore[arg-type]


class Receiver:
    def __init__(
        self,
        settings: OtlpSettings,
        publisher: Publisher,
        metrics: OtlpMetrics,
        clock: Callable[[], float] = time.monotonic,
        scenarios: Callable[[], Iterable[Scenario] | None] | None = None,
        probe: Probe | None = None,
    ) -> None:
        """`scenarios`: the published scenarios now (their `match` rules take traces with no
        passk ids); None, or a call answering None: such traces are skipped."""
        self.settings = settings
        self.scenarios = scenarios
        # PASSK_OTLP_STATE_PROBE: the product's persisted session of each trial whose trace
        # carried none, read before it is published (so the state gate grades it).
        self.probe = probe
        self._probing = asyncio.Semaphore(8)
        self._letters: asyncio.Queue[DeadLetter] | None = None
        self.flood = Once(log)
        self.publisher = publisher
        self.metrics = metrics
        self.clock = clock
        self.pending = PendingTraces(
            Bounds(
                max_pending_traces=settings.max_pending_traces,
                idle_s=settings.idle_s,
                max_spans_per_trace=settings.max_spans_per_trace,
                seen_traces=settings.seen_traces,
                max_pending_bytes=settings.max_pending_bytes,
            )
        )
        # Large bodies and traces are parsed in threads, at most this many at once, so the
        # event loop keeps answering small requests (six 7.8 MB JSON bodies parsed on it
        # made a tiny request wait 46 s).
        self.parsing = asyncio.Semaphore(settings.parallel_parses)
        # Bytes of request bodies read and not yet parsed: bounded, whatever the number
        # of connections.
        self.inflight = ByteBudget(settings.max_inflight_bytes)

    def _count_drops(self, outcome: Outcome) -> Counter[str]:
        rejected: Counter[str] = Counter()
        for _trace, reason, spans in outcome.dropped:
            if reason == "already_published":
                self.metrics.spans_repeated.inc(spans)
            else:
                self.metrics.traces_dropped.labels(reason).inc()
                rejected[reason] += spans
        for trace_id, reason, held in outcome.given_up:
            self.letter(trace_id, reason, f"dropped by the receiver: {reason}", held)
        return rejected

    def letter(self, trace_id: str, reason: str, detail: str, spans: list[Span]) -> None:
        """Queue the dead letter of a trace not taken (published by `send_letters`); past
        the queue's bound the letter is lost, counted, and said once."""
        if self._letters is None:
            self._letters = asyncio.Queue(self.settings.max_queued_letters)
        try:
            if self._letters.full():  # not even built: a flood costs a count, no more
                raise asyncio.QueueFull
            self._letters.put_nowait(
                trace_letter(trace_id, reason, detail[:500], spans, processor="otlp-receiver")
            )
        except asyncio.QueueFull:
            self.metrics.dead_letters_lost.labels(reason).inc()
            self.flood.say(
                "dead_letters_lost",
                "otlp: dead-letter queue full (%d); letters "
                "of traces not taken are being lost (counted in "
                "passk_otlp_dead_letters_lost_total)",
                self.settings.max_queued_letters,
            )

    async def send_letters(self) -> None:
        """Publish queued dead letters, one at a time, for as long as the receiver runs."""
        if self._letters is None:
            self._letters = asyncio.Queue(self.settings.max_queued_letters)
        while True:
            letter = await self._letters.get()
            try:
                await self.publisher.publish_letter(letter)
            except Exception as exc:
                self.metrics.dead_letters_lost.labels(letter.reason).inc()
                self.flood.say(
                    "dead_letter_failed", "otlp: a dead letter could not be published: %s", exc
                )
            else:
                self.metrics.dead_letters.labels(letter.reason).inc()

    def expire(self) -> None:
        self._count_drops(self.pending.expire(self.clock()))
        self.metrics.pending_traces.set(len(self.pending))
        self.metrics.pending_bytes.set(self.pending.bytes)

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
            if sum(sp.size for sp in trace) > self.settings.offload_bytes:
                async with self.parsing:  # a large trace is mapped off the event loop
                    result = await asyncio.to_thread(assemble, trace, rules)
            else:
                result = assemble(trace, rules)
            if isinstance(result, Skipped):
                self.metrics.traces_skipped.labels(result.reason).inc()
                rejected[f"{result.reason} ({result.detail})"] += len(trace)
                self.letter(result.trace_id, result.reason, result.detail, trace)
            else:
                ready.append((trace, result))
        if self.probe is not None:
            probed = await asyncio.gather(*(self._with_session(t) for _, t in ready))
            ready = [(trace, t) for (trace, _), t in zip(ready, probed, strict=True)]
        # A batch's trials wait for the broker together, not one after the other.
        published = await asyncio.gather(
            *(self.publisher.publish(t) for _, t in ready), return_exceptions=True
        )
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
        self.metrics.pending_bytes.set(self.pending.bytes)
        if failure is not None:
            raise failure
        why = "; ".join(f"{n} span(s): {r}" for r, n in sorted(rejected.items()))
        return sum(rejected.values()), why

    async def _with_session(self, taken: Taken) -> Taken:
        if taken.session is not None or self.probe is None:
            return taken
        try:
            async with self._probing:
                found, why = await asyncio.wait_for(
                    self.probe.find(taken.conversation.session_id), self.settings.probe_timeout_s
                )
        except Exception as exc:  # the product is down: the state gate says so, later
            found, why = None, f"{type(exc).__name__}: {exc}"
        if found is None:
            self.metrics.probe_misses.inc()
            self.flood.say(
                "probe_miss",
                "otlp: no persisted session for trial %s from the state probe: %s",
                taken.conversation.trial_id,
                why,
            )
            return taken
        return with_probed_session(taken, found.state, found.exit_reason)

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
    receiver.flood.say(
        f"refused:{reason}", "otlp: refusing requests (%s, %d): %s", reason, status, message[:200]
    )
    return web.json_response({"code": status, "message": message}, status=status)


async def post_traces(request: web.Request) -> web.Response:
    receiver = request.app[STATE]
    if not receiver.authorized(request):
        return _refuse(receiver, 401, "unauthorized", "missing or wrong bearer token")
    settings = receiver.settings
    limit = settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        return _refuse(receiver, 413, "too_large", f"body larger than {limit} bytes")
    # What the body may take of the in-flight budget: its length, or the limit if unsaid.
    claim = min(request.content_length if request.content_length is not None else limit, limit)
    if not await receiver.inflight.acquire(claim, settings.body_timeout_s):
        receiver.metrics.requests_rejected.labels("busy").inc()
        receiver.flood.say(
            "busy",
            "otlp: request bodies in flight reached "
            "PASSK_OTLP_MAX_INFLIGHT_BYTES (%d); clients asked to retry",
            settings.max_inflight_bytes,
        )
        return web.json_response(
            {"code": 503, "message": "busy: retry later"}, status=503, headers={"Retry-After": "1"}
        )
    try:
        return await _read_and_take(receiver, request)
    finally:
        receiver.inflight.release(claim)


async def _read_and_take(receiver: Receiver, request: web.Request) -> web.Response:
    settings = receiver.settings
    limit = settings.max_body_bytes
    try:
        # aiohttp inflates a gzip (or deflate, br) body as it reads, and stops at the
        # limit counted on the inflated bytes: a small bomb is refused like a big body.
        body = await asyncio.wait_for(request.read(), settings.body_timeout_s)
    except web.HTTPRequestEntityTooLarge:
        return _refuse(receiver, 413, "too_large", f"body larger than {limit} bytes")
    except TimeoutError:
        receiver.flood.say(
            "body_timeout",
            "otlp: request bodies not read within %g s are refused (408)",
            settings.body_timeout_s,
        )
        return _refuse(
            receiver, 408, "body_timeout", f"body not received within {settings.body_timeout_s:g} s"
        )
    except ContentEncodingError as exc:
        return _refuse(receiver, 400, "malformed", f"bad Content-Encoding: {exc}")
    except Exception as exc:  # a broken stream or encoding: the client's body, never a 500
        return _refuse(receiver, 400, "malformed", f"unreadable body: {type(exc).__name__}")
    content_type = request.headers.get("Content-Type", "")
    try:
        if len(body) > settings.offload_bytes:
            async with receiver.parsing:
                spans = await asyncio.to_thread(_parse, body, content_type)
        else:
            spans = _parse(body, content_type)
    except PayloadError as exc:
        if str(exc).startswith("unsupported content type"):
            return _refuse(receiver, 415, "unsupported_media_type", str(exc))
        return _refuse(receiver, 400, "malformed", str(exc))
    del body
    try:
        rejected, why = await receiver.accept(spans)
    except Exception as exc:
        receiver.flood.say(
            "unavailable", "otlp: publishing failed, clients asked to retry: %s", exc
        )
        receiver.metrics.requests_rejected.labels("unavailable").inc()
        return web.json_response(
            {"code": 503, "message": f"publishing failed: {exc}"},
            status=503,
            headers={"Retry-After": "5"},
        )
    return _answer(request, rejected, why)


def _parse(body: bytes, content_type: str) -> list[Span]:
    """A body to its spans; every way a body can be wrong is a PayloadError (400): JSON
    nested past the parser's depth, ids that are not hex, a protobuf that is not OTLP."""
    try:
        return list(spans_of(from_body(body, content_type)))
    except PayloadError:
        raise
    except RecursionError:
        raise PayloadError("nested too deep") from None
    except Exception as exc:
        raise PayloadError(f"not an OTLP trace export ({type(exc).__name__})") from None


class ByteBudget:
    """At most `total` bytes claimed at once; a claim waits up to a deadline for room. A
    claim larger than the whole budget is clipped to it (the body limit bounds it anyway)."""

    def __init__(self, total: int) -> None:
        self.total, self.used = total, 0
        self._freed = asyncio.Condition()

    async def acquire(self, n: int, timeout: float) -> bool:
        n = min(n, self.total)
        try:
            async with asyncio.timeout(timeout):
                async with self._freed:
                    await self._freed.wait_for(lambda: self.used + n <= self.total)
                    self.used += n
                    return True
        except TimeoutError:
            return False

    def release(self, n: int) -> None:
        self.used -= min(n, self.total)

        async def wake() -> None:
            async with self._freed:
                self._freed.notify_all()

        asyncio.get_running_loop().create_task(wake())


def make_app(
    receiver: Receiver, extra: Callable[[web.Application], Awaitable[None]] | None = None
) -> web.Application:
    # aiohttp stops reading a body (chunked, no Content-Length) past the limit.
    app = web.Application(client_max_size=receiver.settings.max_body_bytes)
    app[STATE] = receiver
    app.router.add_post("/v1/traces", post_traces)

    async def sweeper(app: web.Application) -> AsyncIterator[None]:
        async def loop() -> None:
            while True:
                await asyncio.sleep(min(1.0, receiver.settings.idle_s / 4))
                receiver.expire()

        task = asyncio.create_task(loop())
        letters = asyncio.create_task(receiver.send_letters())
        yield
        task.cancel()
        letters.cancel()

    app.cleanup_ctx.append(sweeper)
    return app
