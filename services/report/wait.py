"""`passk wait`: until every trial of a run has its verdict in the projection; with the
generator's expected outcomes, also says whether each trial got the one it must get."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def compare(expected: list[dict[str, Any]], actual: dict[str, str]) -> list[tuple[str, str, str]]:
    """(trial_id, expected outcome, actual outcome) for every trial that differs."""
    return [
        (t["trial_id"], t["expected_outcome"], actual.get(t["trial_id"], "missing"))
        for t in expected
        if actual.get(t["trial_id"]) != t["expected_outcome"]
    ]


def await_verdicts(database_url: str, run_id: str, total: int, *, timeout: float,
                   poll_s: float = 1.0, check: Callable[[], None] = lambda: None,
                   on_count: Callable[[int], None] = lambda n: None) -> dict[str, str]:
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


def register(app: typer.Typer) -> None:
    @app.command()
    def wait(
        run_id: str = typer.Option(..., "--run-id", help="the run to wait for"),
        expected: Path | None = typer.Option(
            None, help="expected.json written by `passk generate`: check every outcome"
        ),
        trials: int | None = typer.Option(None, help="how many trials to wait for"),
        timeout: float = typer.Option(600, help="give up after this many seconds"),
    ) -> None:
        """Wait until every trial of a run has its verdict in the projection."""
        from services.contract.exits import console as make_console
        from services.contract.settings import get_settings

        console = make_console()
        wanted = json.loads(expected.read_text())["trials"] if expected else None
        total = len(wanted) if wanted is not None else trials
        if not total:
            raise typer.BadParameter("give --expected or --trials")
        columns = (TextColumn("verdicts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("verdicts", total=total)
            outcomes = await_verdicts(
                get_settings().database_url, run_id, total, timeout=timeout,
                on_count=lambda n: progress.update(task, completed=n))
        if len(outcomes) < total:
            make_console(stderr=True).print(
                f"[red]error: timed out after {timeout:g} s: {len(outcomes)} of {total} "
                "trials have a verdict[/red]")
            raise typer.Exit(1)
        if wanted is None:
            return
        wrong = compare(wanted, outcomes)
        if wrong:
            table = Table("trial", "expected", "got", title="trials that did not get their "
                          "expected outcome")
            for row in wrong:
                table.add_row(*row)
            console.print(table)
            raise typer.Exit(1)
        console.print(f"[green]{len(wanted)}/{len(wanted)} trials got exactly their expected "
                      "outcome[/green]")
