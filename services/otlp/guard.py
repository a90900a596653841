"""What stands between the OTLP receiver and a hostile client before a request reaches a
handler: a bound on open connections and a deadline on request headers.

aiohttp reads a request's headers with no deadline and checks nothing before its handler
runs, so a client that opens connections and never finishes their headers holds one file
descriptor each, forever (20,000 of them took every descriptor the receiver had). The guard
wraps aiohttp's protocol factory:

- past `max_connections` open connections, the oldest one still waiting for its request's
  headers is closed to make room for the new one (none waiting: the new one is closed),
  counted and said once a minute, so descriptors stay bounded whatever a client opens and
  a client that sends its headers at once always gets in;
- each request's headers must end (the blank line) within `header_timeout_s` of the
  connection opening or of the previous response; otherwise the connection is closed. An
  idle keep-alive connection is closed the same way, and the client opens another.

The body has its own deadline in the handler (receiver.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from services.otlp.metrics import OtlpMetrics

END_OF_HEADERS = b"\r\n\r\n"


class Guard:
    """A protocol factory for `loop.create_server`, around aiohttp's `runner.server`."""

    def __init__(
        self,
        inner: Callable[[], asyncio.Protocol],
        *,
        max_connections: int,
        header_timeout_s: float,
        metrics: OtlpMetrics,
        say: Callable[..., None],
    ) -> None:
        self.inner = inner
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.metrics = metrics
        self.say = say
        self.live: dict[Guarded, None] = {}  # oldest first
        self.by_transport: dict[int, Guarded] = {}

    def __call__(self) -> Guarded:
        return Guarded(self)

    def response_sent(self, transport: Any) -> None:
        """A response went out on this connection: its next request's headers are timed."""
        guarded = self.by_transport.get(id(transport))
        if guarded is not None:
            guarded.await_headers()


class Guarded(asyncio.Protocol):
    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.in_headers = False
        self.started = False  # a byte of the awaited request came
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        g = self.guard
        if len(g.live) >= g.max_connections:
            # The oldest connection still waiting for its request's headers makes room: a
            # client that opens connections and never finishes them cannot lock the others
            # out (a real client sends its headers at once). With none waiting, the new
            # connection is closed.
            waiting = next((c for c in g.live if c.in_headers), None)
            g.metrics.connections_refused.inc()
            g.say(
                "connections",
                "otlp: %d connections open, the bound "
                "(PASSK_OTLP_MAX_CONNECTIONS); the oldest waiting for its headers is "
                "closed for each new one",
                g.max_connections,
            )
            if waiting is None:
                transport.close()  # nothing was read or written on it: closed at once
                return
            waiting.evict()
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        g.live[self] = None
        g.by_transport[id(transport)] = self
        g.metrics.connections_open.set(len(g.live))
        self.inner = g.inner()
        self.inner.connection_made(transport)
        self.await_headers()

    def evict(self) -> None:
        """Closed to make room; out of the count at once (its close completes later)."""
        self._cancel()
        self.guard.live.pop(self, None)
        if self.transport is not None:
            self.transport.abort()

    def await_headers(self) -> None:
        self.in_headers, self.tail, self.started = True, b"", False
        self._cancel()
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.guard.header_timeout_s, self._too_slow)

    def _cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _too_slow(self) -> None:
        self.timer = None
        if self.transport is None or not self.in_headers:
            return
        if not self.started:  # an idle keep-alive connection: closed politely
            self.transport.close()
            return
        self.guard.metrics.requests_rejected.labels("header_timeout").inc()
        self.guard.say(
            "header_timeout",
            "otlp: closing connections whose request headers did not end within %g s",
            self.guard.header_timeout_s,
        )
        self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        if self.in_headers:
            self.started = True
            seen = self.tail + data
            if END_OF_HEADERS in seen:
                self.in_headers = False
                self._cancel()
            else:
                self.tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        g = self.guard
        if self.transport is not None:
            g.live.pop(self, None)
            g.by_transport.pop(id(self.transport), None)
            g.metrics.connections_open.set(len(g.live))
        if self.inner is not None:
            self.inner.connection_lost(exc)
