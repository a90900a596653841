"""`passk regrade`'s work, as functions returning values: the trials to grade again, the
requests sent, the new verdicts awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from services.contract.exits import NothingToJudge
from services.contract.settings import Settings

if TYPE_CHECKING:
    from services.regrade.plan import Prepared, Target
    from services.regrade.request import Progress
    from services.storage.store import Store


def choose(store: Store, run_id: str, *, errors_only: bool, sample: float | None) -> list[Target]:
    """The run's trials to grade again (their newest attempt): every one, those whose
    newest verdict is `error`, or (`sample`) the production trials whose LLM judges the
    sample left out and that are in the sample at this rate. NothingToJudge when none."""
    from services.regrade.plan import targets

    only = None
    if sample is not None:
        from services.regrade.plan import left_out

        only = left_out(store.judge_verdicts(run_id), sample)
    chosen = targets(
        store.trials(run_id), store.history(run_id), errors_only=errors_only, only=only
    )
    if not chosen:
        which = "no trial ended `error`" if errors_only else "it has no trials"
        if sample is not None:
            which = f"no trial the sample left out is in the sample at {sample:g}"
        raise NothingToJudge(f"nothing to re-grade in run {run_id!r}: {which}")
    return chosen


def request(
    settings: Settings,
    chosen: list[Target],
    *,
    errors_only: bool,
    sample: float | None,
    wait: float | None,
    track: Callable[[], AbstractContextManager[Progress]],
) -> list[Prepared]:
    """The broker reached, then, inside `track`, each chosen trial's regrade request sent
    (its status says whether it was)."""
    from services.kafka.reach import require_broker
    from services.regrade.request import request_regrades

    require_broker(wait, settings)
    reason = (
        "passk regrade"
        + (" --errors-only" if errors_only else "")
        + (f" --sample {sample:g}" if sample is not None else "")
    )
    with track() as progress:
        return request_regrades(
            settings, chosen, reason=reason, progress=progress, sample_rate=sample
        )


def await_regraded(
    store: Store, run_id: str, sent: list[Target], timeout_s: float, on_count: Callable[[int], None]
) -> dict[str, str]:
    """trial id -> its new outcome, for those of `sent` whose new verdict is in the
    projection once all are, or `timeout_s` has passed."""
    from services.regrade.plan import regraded

    deadline = time.monotonic() + timeout_s
    while True:
        done = regraded(sent, store.history(run_id))
        on_count(len(done))
        if len(done) >= len(sent) or time.monotonic() >= deadline:
            return done
        time.sleep(1.0)
