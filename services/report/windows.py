"""`passk windows`: the latest event-time windows of every scenario, from the projection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from services.contract.exits import NothingToJudge, UsageError, console

if TYPE_CHECKING:  # plotly loads with over_time: only when the command runs
    from rich.console import Console

    from services.report.over_time import WindowView

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def load_windows(database_url: str, last: int, size: str | None,
                 scenarios: list[str] | None = None, runs: str | None = "*"
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
        trials = [t for r in every if shown(r) for t in store.trials(r)
                  if scenarios is None or t.scenario_id in scenarios]
        not_sampled = unsampled(store.judges_of(t.trial_id for t in trials))
        rows = recount(trials, not_sampled, sizes_of(aggregated), aggregated, datetime.now(UTC))
        return views(last_of_each(rows, last))
    finally:
        store.close()


def print_windows(items: list[WindowView], out: Console) -> None:
    from rich.table import Table

    from services.contract.terminal import literal
    from services.report.over_time import stamp

    table = Table(title="reliability per event-time window (latest last)")
    for column in ("scenario", "window", "start (UTC)", "n", "passed", "failed", "errors",
                   "invalid", "pass^k", "90% interval", "pass@k", "sampled", "pass^k sampled",
                   "pass^k judged", "alert"):
        numeric = column not in ("scenario", "window", "start (UTC)", "alert")
        table.add_column(column, justify="right" if numeric else "left")

    def num(v: float | None) -> str:
        return "—" if v is None else f"{v:.3f}"

    for w in items:
        table.add_row(
            literal(w.scenario_id), literal(w.window), stamp(w.window_start), str(w.n),
            str(w.passed), str(w.failed), str(w.errors), str(w.invalid), num(w.pass_hat_k),
            f"[{w.pass_hat_k_lower:.3f}, {w.pass_hat_k_upper:.3f}]", num(w.pass_at_k),
            str(w.n_sampled), num(w.pass_hat_k_sampled), num(w.judged_pass_hat_k),
            "[bold red]ALERT[/]" if w.alert_condition else "",
        )
    out.print(table)


def register(app: typer.Typer) -> None:
    @app.command()
    def windows(
        last: int = typer.Option(6, "--last", min=1, help="windows per scenario and size"),
        window: str = typer.Option(None, "--window", help="one window size (e.g. 1h); "
                                   "default: every size"),
        runs: str = typer.Option(None, "--runs", help="run ids to show: comma-separated "
                                 "globs or prefixes (production-*); '*' every run; default: "
                                 "every run but make demo's (demo-*) and passk ci's (ci-*)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        html: Path = typer.Option(None, "--html", dir_okay=False,
                                  help="also write a page of pictures over time here"),
        database_url: str = typer.Option(None, help="default: PASSK_DATABASE_URL"),
    ) -> None:
        """The latest windows per scenario: pass^k with its credible interval, pass@k, n,
        errors apart, the sampled trials' figures, and whether the reliability-drop alert's
        condition held. Of every run but make demo's and passk ci's unless --runs says.
        Exit 3 when the projection holds no window (of those runs) yet."""
        from services.contract.settings import get_settings
        from services.report.over_time import windows_json

        try:
            items = load_windows(database_url or get_settings().database_url, last, window,
                                 runs=runs)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        if not items:
            raise NothingToJudge("no windows in the projection yet (is the sink running, and "
                                 "has the aggregate published any?)")
        if as_json:
            typer.echo(json.dumps(windows_json(items), ensure_ascii=False))
        else:
            print_windows(items, console())
        if html is not None:
            from datetime import UTC, datetime

            from services.report.over_time import render_windows_page

            try:
                html.write_text(render_windows_page(items, generated_at=datetime.now(UTC)),
                                encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"cannot write {html}: {exc}") from exc
            console(stderr=True).print(f"windows page: {html.resolve()}", soft_wrap=True)
