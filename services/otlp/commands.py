"""`passk import otel FILE... [--dry-run]`: options, then `import_files.import_files`,
then `render`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from services.clikit import BROKER_WAIT, console

if TYPE_CHECKING:
    from services.otlp.importer import Probe

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def register(app: typer.Typer, *, state_probe: Callable[[Path], Callable[[], Probe]]) -> None:
    """`state_probe(path)`: opens a target file's state probe (the harness's target format,
    handed over by the CLI: services/cli/wiring.py)."""
    importer = typer.Typer(help="Import trials from other formats.", no_args_is_help=True)

    @importer.command("otel")
    def import_otel(
        files: list[Path] = typer.Argument(
            ...,
            exists=True,
            dir_okay=False,
            readable=True,
            help="OTLP JSON lines (Collector file exporter) or OTLP protobuf files",
        ),
        dry_run: bool = typer.Option(False, "--dry-run", help="map every trace, send nothing"),
        state_probe_file: Path = typer.Option(
            None,
            "--state-probe",
            exists=True,
            dir_okay=False,
            help="a target file (passk run --target) whose `state:` probe reads the "
            "persisted session of each trial whose trace has no passk.session.state",
        ),
        wait: float | None = BROKER_WAIT,
        as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object"),
    ) -> None:
        """Publish one ConversationFinished (and a SessionPersisted when the trace carries
        passk.session.state) per complete agent trace: root span
        gen_ai.operation.name=invoke_agent. Event ids come from the trace id, so importing
        a file again grades nothing twice. Exit 3 when no trace was taken, 4 when the
        broker is down or did not take a trial (within PASSK_PRODUCER_DELIVERY_TIMEOUT_S;
        the first such trial is named), 130 when stopped (SIGINT), with a summary. Each
        trace not taken is a dead letter (`passk dead-letters` lists them)."""
        from services.contract.settings import get_settings
        from services.otlp.import_files import import_files
        from services.otlp.render import import_progress, print_import

        open_probe = state_probe(state_probe_file) if state_probe_file is not None else None
        settings = get_settings()
        out, err = console(), console(stderr=True)
        done = import_files(
            files,
            settings,
            dry_run=dry_run,
            wait=wait,
            open_probe=open_probe,
            progress=import_progress(err),
            warn=lambda text: err.print(text, markup=False),
        )
        print_import(done, out, err, as_json)
        if done.exit_code:
            raise typer.Exit(done.exit_code)

    app.add_typer(importer, name="import")
