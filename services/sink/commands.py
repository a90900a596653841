"""`passk rebuild`: the sink's projection, recreated from the log."""

from __future__ import annotations

import typer

from services.clikit import BROKER_WAIT, console
from services.contract.exits import CliError, ExitCode
from services.kafka.reach import require_broker

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def register(app: typer.Typer) -> None:
    @app.command()
    def rebuild(
        database_url: str = typer.Option(
            None, help="rebuild into this database (default: PASSK_DATABASE_URL)"
        ),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Recreate the SQL projection from the log (drops and recreates its tables).
        Stop the sink first, or rebuild into another database."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        from services.contract.settings import get_settings
        from services.sink.rebuild import rebuild as run_rebuild

        settings = get_settings()
        url = database_url or settings.database_url
        require_broker(wait, settings)
        err = console(stderr=True)
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
        ) as bar:
            task = bar.add_task("records", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            try:
                stats = run_rebuild(settings, database_url=url, progress=progress)
            except RuntimeError as exc:
                raise CliError(f"rebuild failed: {exc}", ExitCode.UNREACHABLE) from exc
        skipped = ", ".join(f"{r}: {n}" for r, n in sorted(stats.skipped.items())) or "none"
        err.print(
            f"rebuilt the projection at {url}: {stats.records} records read, "
            f"{stats.stored} stored, skipped {skipped}",
            soft_wrap=True,
        )
