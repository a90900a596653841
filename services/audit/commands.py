"""`passk audit [--run-id ID | --since DURATION] [--json] [--repair]`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from services.clikit import BROKER_WAIT
from services.contract.exits import CliError, ExitCode, NothingToJudge, UsageError

if TYPE_CHECKING:
    from services.audit.domain import AuditReport
    from services.audit.reconcile import Recounter, Regrader, TableReader

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def render(report: AuditReport) -> None:
    from rich.table import Table

    from services.clikit import console as make_console
    from services.contract.terminal import literal

    console = make_console()
    stages = Table("stage", "trials", title=f"{report.trials} trials audited"
                   + (f", {report.in_flight} still in flight" if report.in_flight else ""))
    for stage, n in report.stages.items():
        stages.add_row(stage, str(n))
    for reason, n in report.dead_lettered.items():
        stages.add_row(f"dead-lettered: {literal(reason)}", str(n))
    console.print(stages)
    if report.unaccounted:
        lost = Table("trial", "run", "scenario", "stopped at", "detail",
                     title=f"{sum(report.unaccounted_by_stage.values())} unaccounted "
                           "(the first 50)")
        for u in report.unaccounted[:50]:
            lost.add_row(*(literal(cell) for cell in (u.trial_id or "(a count)", u.run_id or "",
                                                       u.scenario_id, u.stopped_at, u.detail)))
        console.print(lost)
    if report.scopes:
        scopes = Table("scenario", "scope", "counted (p/f/e)", "expected (p/f/e)",
                       title="counts that differ from their verdicts")
        for s in report.scopes:
            where = f"run {s.run_id}" if s.scope == "run" else f"{s.scope} @ {s.window_start}"
            scopes.add_row(literal(s.scenario_id), literal(where),
                           f"{s.counted.passed}/{s.counted.failed}/{s.counted.errors}",
                           f"{s.expected.passed}/{s.expected.failed}/{s.expected.errors}")
        console.print(scopes)
    if report.repaired is not None:
        r = report.repaired
        console.print(f"repaired: {r.regraded} re-graded, {r.reprojected} re-projected, "
                      f"{r.recounted_scopes} scopes recounted", markup=False)
    console.print("clean: every trial accounted for" if report.clean
                  else "NOT clean", markup=False)


def register(app: typer.Typer, *, read_table: TableReader, regrade: Regrader,
             recount: Recounter) -> None:
    @app.command()
    def audit(
        run_id: str = typer.Option(None, "--run-id", help="only this run's trials and counts"),
        since: str = typer.Option(
            None, "--since", help="only trials that reached the log this long ago or later "
                                  "(e.g. 90m, 6h, 7d): their windows, not run counts"),
        grace: float = typer.Option(
            None, "--grace", min=0,
            help="seconds a trial may still be in flight (default: the pipeline's deadlines, "
                 "PASSK_SESSION_WAIT_S + PASSK_JUDGE_WAIT_S + 60)"),
        repair: bool = typer.Option(
            False, "--repair", help="re-grade trials stuck before their verdict, re-project "
                                    "missing rows, recount wrong counts; then audit again"),
        repair_wait: float = typer.Option(
            300, "--repair-wait", min=0,
            help="with --repair: seconds to wait for the audit to come out clean"),
        as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Account for every trial: from its ConversationFinished on the log through its
        gate result, judge verdicts, trial verdict, projection row, and the aggregate's
        count in its run and windows. Lists each trial that stopped short and where, and
        each count that differs from its verdicts. Exit 0 clean (also after a repair that
        left it clean), 1 something unaccounted, 3 nothing to audit."""
        from services.audit.reconcile import Scope, audit_until_clean, default_grace_s
        from services.audit.reconcile import audit as audit_log
        from services.audit.reconcile import repair as repair_log
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
        if grace is None:
            grace = default_grace_s(settings)
        scope = Scope(run_id=run_id, since_s=since_s, grace_s=grace)
        with audit_log(settings, scope, read_table) as audited:
            report = audited.report
            if report.trials == 0:
                raise NothingToJudge("nothing to audit: no trial in " + (
                    f"run {run_id!r}" if run_id else "the log" if since is None
                    else f"the last {since}"))
            repaired = None
            if repair and not report.clean:
                repaired = repair_log(settings, audited, regrade=regrade, recount=recount)
        if repaired is not None:
            report = audit_until_clean(settings, scope, read_table, repair_wait)
            report.repaired = repaired
        if as_json:
            typer.echo(json.dumps(report.model_dump(mode="json")))
        else:
            render(report)
        if not report.clean:
            raise CliError(f"{sum(report.unaccounted_by_stage.values())} unaccounted, "
                           f"{len(report.scopes)} "
                           "counts off" + (" after the repair" if repaired else ""),
                           ExitCode.NO)
