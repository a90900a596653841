"""`passk audit [--run-id ID | --since DURATION] [--json] [--repair]`: options, then
`reconcile.audit_and_repair`, then `render`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from services.clikit import BROKER_WAIT, console
from services.contract.exits import CliError, ExitCode, UsageError

if TYPE_CHECKING:
    from services.audit.reconcile import Recounter, Regrader, TableReader

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def register(
    app: typer.Typer, *, read_table: TableReader, regrade: Regrader, recount: Recounter
) -> None:
    @app.command()
    def audit(
        run_id: str = typer.Option(None, "--run-id", help="only this run's trials and counts"),
        since: str = typer.Option(
            None,
            "--since",
            help="only trials that reached the log this long ago or later "
            "(e.g. 90m, 6h, 7d): their windows, not run counts",
        ),
        grace: float = typer.Option(
            None,
            "--grace",
            min=0,
            help="seconds a trial may still be in flight (default: the pipeline's deadlines, "
            "PASSK_SESSION_WAIT_S + PASSK_JUDGE_WAIT_S + 60)",
        ),
        repair: bool = typer.Option(
            False,
            "--repair",
            help="re-grade trials stuck before their verdict, re-project "
            "missing rows, recount wrong counts; then audit again",
        ),
        repair_wait: float = typer.Option(
            300,
            "--repair-wait",
            min=0,
            help="with --repair: seconds to wait for the audit to come out clean",
        ),
        as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Account for every trial: from its ConversationFinished on the log through its
        gate result, judge verdicts, trial verdict, projection row, and the aggregate's
        count in its run and windows. Lists each trial that stopped short and where, and
        each count that differs from its verdicts. Exit 0 clean (also after a repair that
        left it clean), 1 something unaccounted, 3 nothing to audit."""
        from services.audit.reconcile import Scope, audit_and_repair, default_grace_s
        from services.audit.render import print_audit
        from services.contract.settings import get_settings
        from services.grading.windows import parse_duration
        from services.kafka.reach import require_broker

        if run_id is not None and since is not None:
            raise UsageError("give --run-id or --since, not both")
        try:
            since_s = parse_duration(since) if since is not None else None
        except ValueError as exc:
            raise UsageError(f"--since: {exc}") from None
        settings = get_settings()
        require_broker(wait, settings)
        scope = Scope(
            run_id=run_id,
            since_s=since_s,
            grace_s=default_grace_s(settings) if grace is None else grace,
        )
        report = audit_and_repair(
            settings,
            scope,
            read_table=read_table,
            repair_log=repair,
            repair_wait_s=repair_wait,
            regrade=regrade,
            recount=recount,
            described=f"run {run_id!r}"
            if run_id
            else "the log"
            if since is None
            else f"the last {since}",
        )
        if as_json:
            typer.echo(json.dumps(report.model_dump(mode="json")))
        else:
            print_audit(report, console())
        if not report.clean:
            raise CliError(
                f"{sum(report.unaccounted_by_stage.values())} unaccounted, "
                f"{len(report.scopes)} "
                "counts off" + (" after the repair" if report.repaired else ""),
                ExitCode.NO,
            )
