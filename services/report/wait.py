"""`passk wait`: until every trial of a run has its verdict in the projection; with the
generator's expected outcomes, also says whether each trial got the one it must get."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def compare(expected: list[dict[str, Any]], actual: dict[str, str]) -> list[tuple[str, str, str]]:
    """(trial_id, expected outcome, actual outcome) for every trial that differs."""
    return [
        (t["trial_id"], t["expected_outcome"], actual.get(t["trial_id"], "missing"))
        for t in expected
        if actual.get(t["trial_id"]) != t["expected_outcome"]
    ]


def await_verdicts(
    database_url: str,
    run_id: str,
    total: int,
    *,
    timeout: float,
    poll_s: float = 1.0,
    check: Callable[[], None] = lambda: None,
    on_count: Callable[[int], None] = lambda n: None,
) -> dict[str, str]:
    """Each trial's outcome once `total` trials of the run have their verdict in the
    projection, or what there is when `timeout` s have passed (the caller tells). `check`
    runs before each look: it raises to give up early (a worker that died)."""
    from services.storage.store import Store

    store = Store(database_url)
    outcomes: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    try:
        while True:
            check()
            if store.has_schema():
                outcomes = {t.trial_id: t.outcome for t in store.trials(run_id)}
            on_count(min(len(outcomes), total))
            if len(outcomes) >= total or time.monotonic() >= deadline:
                return outcomes
            time.sleep(min(poll_s, max(deadline - time.monotonic(), 0)))
    finally:
        store.close()


def expected_outcomes(expected: Path | None) -> list[dict[str, Any]] | None:
    """The trials of `passk generate`'s expected.json, each with its expected outcome."""
    return json.loads(expected.read_text())["trials"] if expected else None
