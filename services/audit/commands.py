"""`passk audit [--run-id ID | --since DURATION] [--json] [--repair]`: options, then
`reconcile.audit_and_repair`, then `render`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from services.clikit import BROKER_WAIT, console
from services.contract.exits import CliError, ExitCode, UsageError

if TYPE_CHECKING:
    from services.audit.domain import AuditReport
    from services.audit.reconcile import Recounter, Regrader, TableReader

# Imports inside functions here are deferred: every command module loads on each `passk` run.

RUN_ID = typer.Option(None, "--run-id", help="only this run's trials and counts")
SINCE = typer.Option(
    None,
    "--since",
    help="only trials that reached the log this long ago or later "
    "(e.g. 90m, 6h, 7d): their windows, not run counts",
)
GRACE = typer.Option(
    None,
    "--grace",
    min=0,
    help="seconds a trial may still be in flight (default: the pipeline's deadlines, "
    "PASSK_SESSION_WAIT_S + PASSK_JUDGE_WAIT_S + 60)",
)
REPAIR = typer.Option(
    False,
    "--repair",
    help="re-grade trials stuck before their verdict, re-project "
    "missing rows, recount wrong counts; then audit again",
)
REPAIR_WAIT = typer.Option(
    300,
    "--repair-wait",
    min=0,
    help="with --repair: seconds to wait for the audit to come out clean",
)
AS_JSON = typer.Option(False, "--json", help="print the report as JSON")


def parse_since(run_id: str | None, since: str | None) -> float | None:
    """--since as seconds (None without it); a usage error with --run-id too or when it
    does not parse."""
    from services.grading.windows import parse_duration

    if run_id is not None and since is not None:
        raise UsageError("give --run-id or --since, not both")
    try:
        return parse_duration(since) if since is not None else None
    except ValueError as exc:
        raise UsageError(f"--since: {exc}") from None


def described_scope(run_id: str | None, since: str | None) -> str:
    """What the audit looked at, for its messages."""
    if run_id:
        return f"run {run_id!r}"
    return "the log" if since is None else f"the last {since}"


def print_and_exit(report: AuditReport, *, as_json: bool) -> None:
    """Print the report (JSON or a table); exit 1 when something is unaccounted."""
    from services.audit.render import print_audit

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


def register(
    app: typer.Typer, *, read_table: TableReader, regrade: Regrader, recount: Recounter
) -> None:
    @app.command()
    def audit(
        run_id: str = RUN_ID,
        since: str = SINCE,
        grace: float = GRACE,
        repair: bool = REPAIR,
        repair_wait: float = REPAIR_WAIT,
        as_json: bool = AS_JSON,
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Account for every trial: from its ConversationFinished on the log through its
        gate result, judge verdicts, trial verdict, projection row, and the aggregate's
        count in its run and windows. Lists each trial that stopped short and where, and
        each count that differs from its verdicts. Exit 0 clean (also after a repair that
        left it clean), 1 something unaccounted, 3 nothing to audit."""
        from services.audit.reconcile import Scope, audit_and_repair, default_grace_s
        from services.contract.settings import get_settings
        from services.kafka.reach import require_broker

        since_s = parse_since(run_id, since)
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
            described=described_scope(run_id, since),
        )
        print_and_exit(report, as_json=as_json)
