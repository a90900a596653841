"""In-process agents for the runner's tests (the `python` adapter imports them by name)."""

from __future__ import annotations

import asyncio
from typing import Any

SESSIONS: dict[str, int] = {}


def closes_on_third(request: dict[str, Any]) -> dict[str, Any]:
    """Sync: answers, and closes on the third message of its session."""
    session = request["session_id"] or f"s-{request['passk']['trial_id']}"
    SESSIONS[session] = SESSIONS.get(session, 0) + 1
    done = SESSIONS[session] >= 3
    return {
        "session_id": session,
        "reply": f"reply {SESSIONS[session]}",
        "exit_reason": "product_closed" if done else None,
        "usage": {"input_tokens": 2, "output_tokens": 1},
    }


async def slow_for_trial_2(request: dict[str, Any]) -> dict[str, Any]:
    if request["passk"]["trial_id"].endswith(":002"):
        await asyncio.sleep(30)
    return {
        "session_id": "x" + request["passk"]["trial_id"],
        "reply": "ok",
        "exit_reason": "product_closed",
    }


def raises(request: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("database is locked")


def garbage(request: dict[str, Any]) -> Any:
    return "<html>"


async def slow(request: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(30)
    return {"reply": "late"}
