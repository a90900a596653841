"""Deadlines for keyed state in a Faust table.

Faust writes a table's changelog to the partition of the event being processed, so
state may only change inside the agent's stream. A timer therefore does not expire
state itself: it sends a tick, keyed like the state, to a topic the agent reads, and
the agent re-examines that key in order with its other events.
"""

from __future__ import annotations

import json
from typing import Any

import faust


def table_value(state: dict[str, Any], due_at: float | None) -> dict[str, Any]:
    """What the table holds per key: the state and when it next needs a look."""
    return {"state": state, "due_at": due_at}


class DeadlineTicker:
    def __init__(self, table: faust.types.TableT, ticks: faust.TopicT, again_after_s: float = 10.0):
        self.table = table
        self.ticks = ticks
        self.again_after_s = again_after_s
        # A key already ticked is not ticked again for a while, so a backlogged agent is
        # not flooded; if that tick was lost (a crash), the next one follows.
        self._ticked: dict[str, float] = {}

    async def tick_due(self, now: float) -> int:
        sent = 0
        for key, value in list(self.table.items()):
            due = value.get("due_at") if value else None
            if due is None or due > now or now - self._ticked.get(key, 0.0) < self.again_after_s:
                continue
            self._ticked[key] = now
            await self.ticks.send(key=key.encode(), value=json.dumps({"tick_at": now}).encode())
            sent += 1
        for key in [k for k, at in self._ticked.items() if now - at >= self.again_after_s]:
            del self._ticked[key]
        return sent
