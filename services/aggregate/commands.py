"""`passk aggregate recount [--scenario S]`: rebuild the aggregate's counts from the verdict
log (what replaced the by-hand reset of its table with Kafka's tools). Options, then
`recounting.recount_aggregate`, then `render`."""

from __future__ import annotations

import json

import typer

from services.aggregate.recounting import Paused
from services.clikit import BROKER_WAIT, console

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def register(app: typer.Typer, *, paused: Paused) -> None:
    aggregate = typer.Typer(
        help="The aggregate's counts: recount them from the verdict log.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    app.add_typer(aggregate, name="aggregate")

    @aggregate.command()
    def recount(
        scenario: list[str] = typer.Option(
            None, "--scenario", help="only this scenario (repeatable); default every one"
        ),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Rebuild the aggregate's run and window counts from the verdict log: stops the
        aggregate (under `make up`; otherwise its workers must be stopped first, exit 2),
        recounts each trial's newest verdict as the aggregate counts it, writes what differs
        to its table's changelog, publishes the new figures and starts it again. Exit 0."""
        from services.aggregate.recounting import recount_aggregate
        from services.aggregate.render import print_recounted
        from services.contract.settings import get_settings
        from services.kafka.reach import require_broker

        settings = get_settings()
        require_broker(wait, settings)
        err = console(stderr=True)
        result = recount_aggregate(
            settings,
            set(scenario) if scenario else None,
            paused,
            lambda step, done, total: err.print(f"{step}: {done}/{total}", end="\r"),
        )
        if as_json:
            typer.echo(json.dumps(result.as_json()))
            return
        print_recounted(result, console())
