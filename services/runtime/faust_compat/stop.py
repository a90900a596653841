"""A worker that stops promptly when its broker is gone (installed by `apply`).

On SIGTERM Faust stops its consumer thread, which stops the aiokafka consumer, whose
`Fetcher.close` cancels the fetch requests in flight and awaits each. With the broker
gone, a fetch request is in its error branch, sleeping its retry backoff; cancelled
there, it ends with the CancelledError itself, and `close` (aiokafka 0.14.0) awaits it
without suppressing that, as its own fetch routine does for the same tasks. The error
leaves the consumer thread without saying it stopped, and the worker waited out mode's
60 s shutdown timeout before it exited (seen: a supervised worker needed SIGKILL).

The wrapper first cancels and awaits those tasks as the fetch routine does (their
cancellation is their expected end; a cancellation of the closing task during the close
still propagates, one from before it began does not), then runs aiokafka's `close`,
which then has none left to await.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.consumer.fetcher import Fetcher

from services.runtime.faust_compat.patching import Patch


def _cancellations() -> int:
    current = asyncio.current_task()
    return 0 if current is None else current.cancelling()


async def _cancelled(task: asyncio.Task[Any], cancellations: int) -> None:
    """Cancel `task` and await its end; its CancelledError is swallowed unless the closing
    task itself was cancelled meanwhile (more cancellations than the `cancellations` it
    had when the close began: a cancellation from before is not this close's to raise)."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if _cancellations() > cancellations:
            raise


def _install() -> None:
    original = Fetcher.close

    async def close(self: Any) -> None:
        # Closed first, as aiokafka's close does: the fetch routine must not start a new
        # request while the ones in flight are awaited.
        self._closed = True
        cancellations = _cancellations()
        await _cancelled(self._fetch_task, cancellations)
        for task in list(self._pending_tasks):
            await _cancelled(task, cancellations)
        self._pending_tasks.clear()
        await original(self)

    close.__wrapped__ = original  # type: ignore[attr-defined]  # for the tests
    Fetcher.close = close


PATCH = Patch(_install)
