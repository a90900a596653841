"""A `python` agent for `passk run` tests that need a run to last a while: each reply takes
0.4 s, the product closes on the third message, and the session is named
after the trial (so a test can prepare the persisted sessions a state probe reads). With
PASSK_TEST_CLOSED_LOG set, each trial the product closes is written to that file."""

from __future__ import annotations

import asyncio
import os
from typing import Any

SESSIONS: dict[str, int] = {}
REPLY_S = 0.4


async def closes_on_third(request: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(REPLY_S)
    session = request["session_id"] or session_of(request["passk"]["trial_id"])
    SESSIONS[session] = SESSIONS.get(session, 0) + 1
    closed = SESSIONS[session] >= 3
    if closed and os.environ.get("PASSK_TEST_CLOSED_LOG"):  # tells a test it is probing now
        with open(os.environ["PASSK_TEST_CLOSED_LOG"], "a") as log:
            log.write(request["passk"]["trial_id"] + "\n")
    return {
        "session_id": session,
        "reply": f"reply {SESSIONS[session]}",
        "exit_reason": "product_closed" if closed else None,
    }


def session_of(trial_id: str) -> str:
    return f"s-{trial_id}"
