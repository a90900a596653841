"""Faust's producer buffer (where table changelog writes wait to be sent) is flushed before
every offset commit: the flush must not return while a write put before it is still in
the process, or the commit covers an event whose writes a SIGKILL then loses. Driven
with a real `ProducerBuffer` and its real hand-off task; the producer behind it is a
channel whose sends the test holds back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from faust.transport.producer import ProducerBuffer

from services.runtime import faust_compat

faust_compat.apply()  # the fix under test (what make_app does)


class HeldChannel:
    """Hands a message on to the 'producer' only when its gate opens."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.gates: dict[int, asyncio.Event] = {}

    def message(self, n: int, *, open_now: bool = False) -> Any:
        self.gates[n] = asyncio.Event()
        if open_now:
            self.gates[n].set()
        return SimpleNamespace(message=SimpleNamespace(channel=self), n=n)

    async def publish_message(self, fut: Any, wait: bool = False) -> None:
        await self.gates[fut.n].wait()
        self.sent.append(fut.n)

    def open(self, *ns: int) -> None:
        for n in ns:
            self.gates[n].set()


@pytest.fixture
async def buffer() -> AsyncIterator[ProducerBuffer]:
    buf = ProducerBuffer()
    buf.app = SimpleNamespace(conf=SimpleNamespace(producer_threaded=False))  # type: ignore[assignment]
    await buf.start()
    yield buf
    await buf.stop()


async def test_a_flush_waits_for_writes_slower_than_a_tenth_of_a_second(
    buffer: ProducerBuffer,
) -> None:
    channel = HeldChannel()
    for n in range(3):
        buffer.put(channel.message(n))
    flushing = asyncio.ensure_future(buffer.flush())
    await asyncio.sleep(0.5)  # Faust's own flush gave up after 0.1 s without progress
    assert not flushing.done(), "flush returned with every write still unsent"
    channel.open(0, 1, 2)
    await asyncio.wait_for(flushing, 10)
    assert channel.sent == [0, 1, 2]


async def test_a_flush_waits_for_the_write_being_handed_on(buffer: ProducerBuffer) -> None:
    channel = HeldChannel()
    buffer.put(channel.message(0))
    for _ in range(100):  # the hand-off task takes it off the queue
        if buffer.size == 0:
            break
        await asyncio.sleep(0.01)
    assert buffer.size == 0
    flushing = asyncio.ensure_future(buffer.flush())
    await asyncio.sleep(0.3)
    assert not flushing.done(), "flush did not count the write it was handing on"
    channel.open(0)
    await asyncio.wait_for(flushing, 10)
    assert channel.sent == [0]


async def test_a_flush_does_not_wait_for_writes_put_after_it(buffer: ProducerBuffer) -> None:
    # Those belong to events not yet acknowledged, which the commit does not cover; waiting
    # for them could hold a commit back for as long as the agent keeps writing.
    channel = HeldChannel()
    buffer.put(channel.message(0))
    flushing = asyncio.ensure_future(buffer.flush())
    await asyncio.sleep(0)
    buffer.put(channel.message(1))
    channel.open(0)
    await asyncio.wait_for(flushing, 10)
    assert channel.sent == [0]
    channel.open(1)
    await asyncio.wait_for(buffer.flush(), 10)
    assert channel.sent == [0, 1]


async def test_writes_keep_their_order(buffer: ProducerBuffer) -> None:
    # A trial's memory is written before its counts; recovery relies on that order.
    channel = HeldChannel()
    for n in range(50):
        buffer.put(channel.message(n, open_now=True))
    await asyncio.wait_for(buffer.flush(), 10)
    assert channel.sent == list(range(50))
