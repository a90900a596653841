"""What `passk aggregate recount` prints, with rich: the scopes whose counts moved."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from services.aggregate.recounting import Recounted
from services.contract.terminal import literal


def print_recounted(result: Recounted, console: Console) -> None:
    table = Table(
        "scenario",
        "scope",
        "before (passed/failed/errors)",
        "after",
        title=f"recounted {result.verdicts} trials: {len(result.scopes)} scopes "
        f"changed, {result.writes} table writes",
    )
    for s in result.scopes:
        where = (
            f"run {s['run_id']}" if s["scope"] == "run" else (f"{s['scope']} @ {s['window_start']}")
        )
        before = s["before"]
        table.add_row(
            literal(s["scenario_id"]),
            literal(where),
            "/".join(str(v) for v in before.values()) if before else "(none)",
            "/".join(str(v) for v in s["after"].values()),
        )
    console.print(table)
