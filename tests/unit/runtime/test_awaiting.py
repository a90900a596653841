"""What each task awaits, followed to the innermost await (SIGUSR2 in a worker)."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from services.runtime.awaiting import SIGNAL, await_chain, describe, log_on_signal


async def innermost(gate: asyncio.Event) -> None:
    await gate.wait()


async def middle(gate: asyncio.Event) -> None:
    await innermost(gate)


async def outer(gate: asyncio.Event) -> None:
    await middle(gate)


def test_the_chain_goes_from_the_task_to_what_it_waits_on() -> None:
    async def scenario() -> list[str]:
        gate = asyncio.Event()
        task = asyncio.create_task(outer(gate), name="stuck")
        await asyncio.sleep(0)
        chain = await_chain(task)
        text = describe([task])
        gate.set()
        await task
        assert text.startswith("task stuck (") and "innermost" in text
        return chain

    chain = asyncio.run(scenario())
    names = [line.rsplit(" ", 1)[-1] for line in chain[:3]]
    assert names == ["outer", "middle", "innermost"]  # not only the task's own frame
    assert "Event.wait" in chain[3] and chain[-1].startswith("awaits ")  # its future


def test_sigusr2_logs_every_task_with_its_chain(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        task = asyncio.create_task(outer(gate), name="waiting-agent")
        log_on_signal(asyncio.get_running_loop())
        try:
            with caplog.at_level(logging.WARNING, logger="services.runtime.awaiting"):
                os.kill(os.getpid(), SIGNAL)
                for _ in range(500):  # the handler runs on the loop: give it turns
                    if caplog.records:
                        break
                    await asyncio.sleep(0.01)
        finally:
            asyncio.get_running_loop().remove_signal_handler(SIGNAL)
            gate.set()
            await task

    asyncio.run(scenario())
    (record,) = caplog.records
    text = record.getMessage()
    assert "task waiting-agent (" in text and "middle" in text and "innermost" in text
    assert text.rstrip().endswith("end of tasks")


class Wrapped:
    """Awaited through its __await__ and read with `async for`, as Faust's actors and
    streams are: the chain goes through both wrappers."""

    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate

    def __await__(self):  # type: ignore[no-untyped-def]
        return self.consume().__await__()

    async def consume(self) -> None:
        async for _ in self.records():
            pass

    async def records(self):  # type: ignore[no-untyped-def]
        await innermost(self.gate)
        yield 1


def test_the_chain_goes_through_await_and_async_for_wrappers() -> None:
    async def scenario() -> list[str]:
        gate = asyncio.Event()

        async def actor() -> None:
            await Wrapped(gate)

        task = asyncio.create_task(actor())
        await asyncio.sleep(0)
        chain = await_chain(task)
        gate.set()
        await task
        return chain

    names = [line.rsplit(" ", 1)[-1] for line in asyncio.run(scenario())]
    assert names[:4] == [
        "test_the_chain_goes_through_await_and_async_for_wrappers.<locals>.scenario.<locals>.actor",
        "Wrapped.consume",
        "Wrapped.records",
        "innermost",
    ]
