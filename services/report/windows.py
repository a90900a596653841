"""`passk windows`: the latest event-time windows of every scenario, from the projection."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # plotly loads with over_time: only when it is needed
    from services.report.over_time import WindowView


def load_windows(
    database_url: str,
    last: int,
    size: str | None,
    scenarios: list[str] | None = None,
    runs: str | None = "*",
) -> list[WindowView]:
    """The latest windows; of the runs `runs` names (services/report/run_windows.py; None:
    the default, every run but make demo's and passk ci's; "*": every run)."""
    from datetime import UTC, datetime

    from services.report.over_time import views
    from services.report.run_windows import last_of_each, recount, run_filter, sizes_of, unsampled
    from services.storage.store import Store

    shown = run_filter(runs)
    # A store that cannot be reached escapes as OperationalError: exit 4 (services.cli).
    store = Store(database_url)
    try:
        every = store.runs()
        if all(shown(r) for r in every):  # the aggregate's own records: what the alert saw
            return views(store.windows(last, size=size, scenarios=scenarios))
        aggregated = store.windows(size=size, scenarios=scenarios)
        trials = [
            t
            for r in every
            if shown(r)
            for t in store.trials(r)
            if scenarios is None or t.scenario_id in scenarios
        ]
        not_sampled = unsampled(store.judges_of(t.trial_id for t in trials))
        rows = recount(trials, not_sampled, sizes_of(aggregated), aggregated, datetime.now(UTC))
        return views(last_of_each(rows, last))
    finally:
        store.close()
