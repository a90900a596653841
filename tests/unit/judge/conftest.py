from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from services.judge.standin import StandinConfig, start

StartStandin = Callable[..., Awaitable[str]]


@pytest.fixture
async def standin() -> AsyncIterator[StartStandin]:
    """Start a real stand-in HTTP server on a free local port; returns its base URL."""
    runners = []

    async def _start(**config: Any) -> str:
        runner, port = await start(StandinConfig(**config))
        runners.append(runner)
        return f"http://127.0.0.1:{port}/v1"

    yield _start
    for runner in runners:
        await runner.cleanup()


async def standin_stats(base_url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url.removesuffix("/v1") + "/stats") as response:
            return await response.json()
