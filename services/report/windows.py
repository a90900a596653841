"""`passk windows`: the latest event-time windows of every scenario, from the projection."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # plotly loads with over_time: only when it is needed
    from services.report.over_time import WindowView


def load_windows(database_url: str, last: int, size: str | None,
                 scenarios: list[str] | None = None) -> list[WindowView]:
    from services.report.over_time import views
    from services.storage.store import Store

    # A store that cannot be reached escapes as OperationalError: exit 4 (services.cli).
    store = Store(database_url)
    try:
        return views(store.windows(last, size=size, scenarios=scenarios))
    finally:
        store.close()
