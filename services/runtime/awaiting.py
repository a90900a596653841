"""What each asyncio task of a worker is waiting on, all the way down: SIGUSR2 logs it.

mode's SIGUSR1 prints each task's stack, but Python 3.11 keeps one frame per suspended
task, so an agent shows as `Agent._execute_actor: await coro` whatever it waits on. This
follows each task's chain of awaited coroutines (`cr_await`) to the innermost one, so a
worker that is up and does not read says where it waits: in its own steps, in the
stream, in a table's recovery (docs/operations.md, "Health").
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

SIGNAL = signal.SIGUSR2
MAX_DEPTH = 64  # an await chain is a handful of frames; a cycle must not loop forever


def _frame_of(awaitable: Any) -> FrameType | None:
    for name in ("cr_frame", "ag_frame", "gi_frame"):
        frame = getattr(awaitable, name, None)
        if frame is not None:
            return frame
    return None


# What `await obj` (obj.__await__()) and `async for` (its __anext__) leave to be followed:
# wrappers that expose nothing, but hold the coroutine or async generator they drive.
WRAPPERS = frozenset({"coroutine_wrapper", "async_generator_asend", "async_generator_athrow"})


def _awaited_by(awaitable: Any) -> Any:
    for name in ("cr_await", "ag_await", "gi_yieldfrom"):
        inner = getattr(awaitable, name, None)
        if inner is not None:
            return inner
    if type(awaitable).__name__ in WRAPPERS:
        return next(
            (held for held in gc.get_referents(awaitable) if _frame_of(held) is not None), None
        )
    return None


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """The task's awaits from its coroutine to the innermost thing awaited, one line each:
    where each coroutine is suspended (file:line function), then what it awaits."""
    lines: list[str] = []
    awaitable: Any = task.get_coro()
    for _ in range(MAX_DEPTH):
        if awaitable is None:
            break
        frame = _frame_of(awaitable)
        if frame is not None:
            code = frame.f_code
            lines.append(f"{code.co_filename}:{frame.f_lineno} {code.co_qualname}")
        elif type(awaitable).__name__ not in WRAPPERS:  # a future, a task: the end
            lines.append(f"awaits {_short(repr(awaitable))}")
        awaitable = _awaited_by(awaitable)
    return lines


def describe(tasks: Iterable[asyncio.Task[Any]]) -> str:
    """Every task's name and await chain, the tasks in name order."""
    out: list[str] = []
    for task in sorted(tasks, key=lambda t: t.get_name()):
        out.append(f"task {task.get_name()} ({_short(repr(task.get_coro()))})")
        out.extend(f"    {line}" for line in await_chain(task))
    return "\n".join(out)


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def log_on_signal(loop: asyncio.AbstractEventLoop, state: Callable[[], str] = lambda: "") -> None:
    """Log every task's await chain on this loop, after `state` (what else the worker
    can say about itself), when the process gets SIGUSR2."""

    def dump() -> None:
        try:
            said = state()
        except Exception as exc:  # the tasks are still worth logging
            said = f"(state unreadable: {type(exc).__name__}: {exc})"
        log.warning(
            "asyncio tasks and what each awaits (SIGUSR2):\n%s\n%s\nend of tasks",
            said,
            describe(asyncio.all_tasks(loop)),
        )

    loop.add_signal_handler(SIGNAL, dump)
