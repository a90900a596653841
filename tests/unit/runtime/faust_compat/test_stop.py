"""A consumer closing while its broker is gone: aiokafka's own `Fetcher.close` and fetch
request (the installed aiokafka, no stub of either) with only the network edge replaced
by a client whose every send fails, as with the broker down."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.errors import KafkaConnectionError

from services.runtime.faust_compat import stop


class BrokerGone:
    async def send(self, node_id: int, request: Any) -> Any:
        raise KafkaConnectionError(f"Connection at node {node_id} closed")


async def fetcher_retrying_a_fetch() -> Any:
    """A Fetcher whose one fetch request in flight has failed and sleeps its backoff."""
    fetcher: Any = Fetcher.__new__(Fetcher)
    fetcher._client = BrokerGone()
    fetcher._retry_backoff = 30.0
    fetcher._preferred_read_replica = {}
    fetcher._closed = False
    fetcher._fetch_waiters = set()
    fetcher._fetch_task = asyncio.ensure_future(asyncio.sleep(3600))  # the fetch routine
    request = SimpleNamespace(topics=[("t", [(0, 0, 0)])])
    in_flight = asyncio.ensure_future(fetcher._proc_fetch_request({}, 1, request))
    fetcher._pending_tasks = {in_flight}
    await asyncio.sleep(0.05)  # failed, now in its backoff
    assert not in_flight.done()
    return fetcher


def unpatched_close() -> Any:
    return getattr(Fetcher.close, "__wrapped__", Fetcher.close)


def test_aiokafkas_close_raises_the_cancelled_fetch_instead_of_closing() -> None:
    async def scenario() -> None:
        fetcher = await fetcher_retrying_a_fetch()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(unpatched_close()(fetcher), 5)

    asyncio.run(scenario())


def test_with_the_patch_the_consumer_closes_at_once() -> None:
    stop.PATCH.apply()

    async def scenario() -> float:
        fetcher = await fetcher_retrying_a_fetch()
        (in_flight,) = fetcher._pending_tasks
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(Fetcher.close(fetcher), 5)
        assert fetcher._closed and in_flight.cancelled() and not fetcher._pending_tasks
        return loop.time() - started

    assert asyncio.run(scenario()) < 1.0  # not the 30 s backoff, nor mode's 60 s wait


def test_a_close_that_is_itself_cancelled_still_ends_cancelled() -> None:
    stop.PATCH.apply()

    async def slow_to_stop() -> None:  # outlives the first cancel, not the second
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(3600)

    async def scenario() -> None:
        fetcher = await fetcher_retrying_a_fetch()
        fetcher._pending_tasks.add(asyncio.ensure_future(slow_to_stop()))
        closing = asyncio.ensure_future(Fetcher.close(fetcher))
        await asyncio.sleep(0.05)
        assert not closing.done()  # waiting on the slow one
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(closing, 5)

    asyncio.run(scenario())


def test_aiokafkas_close_still_awaits_its_fetch_requests_unguarded() -> None:
    """What the patch rests on (read from the installed aiokafka): when a release guards
    these awaits itself, the patch can go (docs/faust.md, patch 8)."""
    source = inspect.getsource(unpatched_close())
    assert "for x in self._pending_tasks:" in source
    assert "x.cancel()\n            await x" in source


def test_a_close_begun_by_a_task_already_cancelled_still_closes() -> None:
    """Shutdown code often closes the consumer in the `except CancelledError` of a
    cancelled task: that earlier cancellation is not the close's to raise, or the close
    would stop at its first await and leave the fetch request running."""
    stop.PATCH.apply()

    async def scenario() -> None:
        fetcher = await fetcher_retrying_a_fetch()
        (in_flight,) = fetcher._pending_tasks
        closed = asyncio.Event()

        async def stopping_consumer() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                await Fetcher.close(fetcher)
                closed.set()

        consumer = asyncio.ensure_future(stopping_consumer())
        await asyncio.sleep(0)
        consumer.cancel()
        await asyncio.wait_for(closed.wait(), 5)
        assert fetcher._closed and in_flight.cancelled() and not fetcher._pending_tasks

    asyncio.run(scenario())
