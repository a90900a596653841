"""A fix for faust-streaming 0.15.3's flush before an offset commit (installed by `apply`).

A table's changelog writes do not go straight to the Kafka producer: `send_soon` puts
them in Faust's `ProducerBuffer`, a queue that one background task hands, one message at
a time, to aiokafka. Before committing offsets Faust calls `Producer.flush()`, which
flushes that buffer and then aiokafka's. But the buffer's flush (`flush_atmost`) stops
waiting as soon as 0.1 s pass without a message handed on, and it counts only the queued
messages, not the one the task is handing on (which can wait a long time for room in a
full aiokafka batch). Under load either way it returns with writes of already processed
events still in the process; Faust then commits those events' offsets, and a SIGKILL
loses the writes for good, since the events are never read again. In the aggregate
this left a re-graded trial's move undone in one window (its last write) while the
trial's memory said it was done (README, Known limits, issue 7).

The fix counts the messages put and handed on, and makes a flush wait until every
message put before it was handed to aiokafka (whose own flush then waits for their
delivery). Messages put during the flush belong to events not yet acknowledged, whose
offsets this commit does not cover, so the flush does not wait for them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from faust.transport.producer import ProducerBuffer

from services.runtime.faust_compat.patching import Patch

PROGRESS_CHECK_S = 1.0  # how often a waiting flush looks whether the buffer still runs


def _install() -> None:
    """Install the counting flush on faust's ProducerBuffer."""
    original_post_init = ProducerBuffer.__post_init__
    original_put = ProducerBuffer.put
    original_send_pending = ProducerBuffer._send_pending
    original_flush = ProducerBuffer.flush

    def __post_init__(self: Any) -> None:
        original_post_init(self)
        self._passk_put = 0  # messages put in the queue so far
        self._passk_handed = 0  # of those, handed to the producer (or failed to be)

    def put(self: Any, fut: Any) -> None:
        original_put(self, fut)
        self._passk_put += 1

    async def _send_pending(self: Any, fut: Any) -> None:
        try:
            await original_send_pending(self, fut)
        finally:
            self._passk_handed += 1

    async def flush(self: Any) -> None:
        if self.app is None or self.app.conf.producer_threaded:
            return await original_flush(self)  # that path drains its own queue
        target = self._passk_put
        while self._passk_handed < target:
            if self.state != "running" or self.should_stop:
                # Stopping or crashed: the task no longer hands anything on; Faust's own
                # flush raises if messages are left, which is what a commit must see.
                return await original_flush(self)
            self.message_sent.clear()  # set by the task after each message handed on
            if self._passk_handed >= target:
                break
            try:
                await asyncio.wait_for(self.message_sent.wait(), PROGRESS_CHECK_S)
            except TimeoutError:
                continue

    ProducerBuffer.__post_init__ = __post_init__  # type: ignore[method-assign]
    ProducerBuffer.put = put  # type: ignore[method-assign]
    ProducerBuffer._send_pending = _send_pending  # type: ignore[method-assign]
    ProducerBuffer.flush = flush  # type: ignore[method-assign]


PATCH = Patch(_install)
