"""`passk show`, `passk report`, `passk gate` (the deploy gate) and `passk compare`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from services.contract.exits import (
    ExitCode,
    NothingToJudge,
    UsageError,
    console,
)
from services.storage.db import redacted

if TYPE_CHECKING:
    from services.report.domain import RunReport
    from services.report.judge_cost import Prices
    from services.report.trial_view import TrialView
    from services.storage.records import TranscriptRecord, TrialRecord
    from services.storage.store import Store

# Imports inside functions here are deferred: every command module loads on each `passk` run.

def _known(runs: list[str]) -> str:
    """The first ten runs the projection knows, for the message about one it does not."""
    return ", ".join(runs[:10]) + (", …" if len(runs) > 10 else "") or "none"


def _load_report(run_id: str, database_url: str | None) -> tuple[RunReport, list[str], str]:
    from services.contract.settings import get_settings
    from services.report.load import load_report

    settings = get_settings()
    return load_report(run_id, database_url or settings.database_url, settings)


def _prices() -> Prices:
    from services.contract.settings import get_settings
    from services.report.load import prices

    return prices(get_settings())


def _own(trial: TrialRecord, kept: TranscriptRecord | None) -> TranscriptRecord | None:
    from services.report.load import own

    return own(trial, kept)


def open_trial(store: Store, trial_id: str) -> TrialView | None:
    """The view `passk show` prints of one trial in the projection, or None when there is
    no such trial (the review app's item page shows the same, services/cli/wiring.py)."""
    from services.report.trial_view import build_view
    from services.storage.records import of_trial

    trial = store.trial(trial_id)
    if trial is None:
        return None
    return build_view(trial, [g for g in store.trial_gates(trial_id) if of_trial(trial, g)],
                      [j for j in store.trial_judges(trial_id) if of_trial(trial, j)],
                      _own(trial, store.transcript(trial_id)), _prices())




def register(app: typer.Typer) -> None:
    @app.command()
    def show(
        trial_id: str = typer.Argument(..., help="the trial to open"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        database_url: str = typer.Option(None, help="default: PASSK_DATABASE_URL"),
    ) -> None:
        """One trial from the projection: its transcript, every check with its verdict and
        reason, and the persisted state beside each expectation (the failing paths marked).
        Exit 3 when the projection has no such trial, 4 when the store is unreachable."""
        from services.contract.settings import get_settings
        from services.report.trial_view import print_view, view_json
        from services.storage.store import Store

        store = Store(database_url or get_settings().database_url)
        try:
            view = open_trial(store, trial_id)
            if view is None:
                raise NothingToJudge(
                    f"unknown trial {trial_id!r}: no trial verdict in the projection "
                    f"({redacted(store.url)})")
        finally:
            store.close()
        if as_json:
            typer.echo(json.dumps(view_json(view), ensure_ascii=False))
        else:
            print_view(view, console())

    @app.command()
    def report(
        run_id: str = typer.Option(..., "--run-id", help="the run to report on"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        html: Path = typer.Option(
            None, "--html", help="also write one self-contained page (charts inlined) here",
            dir_okay=False,
        ),
        database_url: str = typer.Option(None, help="default: PASSK_DATABASE_URL"),
    ) -> None:
        """pass@k and pass^k per scenario of a run, and the checks that fail most."""
        from services.report.domain import report_json
        from services.report.render import print_report

        result, runs, url = _load_report(run_id, database_url)
        if not result.trials:
            raise NothingToJudge(f"unknown run {run_id!r}: no trial verdicts in the projection "
                                 f"({url}). Known runs: {_known(runs)}")
        if as_json:
            typer.echo(json.dumps(report_json(result), ensure_ascii=False))
        else:
            print_report(result, console())
        if html is not None:
            from services.contract.settings import get_settings
            from services.report.load import report_page

            settings = get_settings()
            try:
                html.write_text(report_page(result, database_url or settings.database_url,
                                            settings), encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"cannot write {html}: {exc}") from exc
            console(stderr=True).print(f"report page: {html.resolve()}", soft_wrap=True)

    @app.command()
    def gate(
        run_id: str = typer.Option(..., "--run-id", help="the run to gate"),
        expect_scenarios: int = typer.Option(
            None, "--expect-scenarios", min=1, help="fail unless this many scenarios were seen"
        ),
        database_url: str = typer.Option(None, help="default: PASSK_DATABASE_URL"),
    ) -> None:
        """The deploy gate: exit 0 when every scenario passed pass^k, 1 when any failed or
        has too few trials, 3 when the run has no trials at all, 4 when the store is down."""
        from services.report.domain import gate_decision
        from services.report.render import print_gate

        result, _, _ = _load_report(run_id, database_url)
        decision = gate_decision(result, expect_scenarios)
        print_gate(decision, console(stderr=decision.exit_code == ExitCode.NOTHING_TO_JUDGE))
        raise typer.Exit(decision.exit_code)

    @app.command()
    def compare(
        base: str = typer.Option(..., "--base", help="the run to compare against (the last build)"),
        run: str = typer.Option(..., "--run", help="the run under test (this build)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        fail_on_regression: bool = typer.Option(
            False, "--fail-on-regression", help="exit 1 when a scenario confidently regressed"
        ),
        database_url: str = typer.Option(None, help="default: PASSK_DATABASE_URL"),
    ) -> None:
        """pass^k of two runs per scenario with credible intervals, the change, and a
        regression flag when the run is confidently worse; tokens, turns and duration
        medians beside (tracked, never gating). Exit 1 on a regression with
        --fail-on-regression, 3 when a run has no trials, 4 when the store is unreachable."""
        from services.report.compare import compare_runs
        from services.report.render import print_comparison

        reports = []
        for run_id in (base, run):
            result, runs, url = _load_report(run_id, database_url)
            if not result.trials:
                raise NothingToJudge(f"run {run_id!r} has no trial verdicts in the projection "
                                     f"({url}): nothing to compare. Known runs: {_known(runs)}")
            reports.append(result)
        comparison = compare_runs(*reports)
        if as_json:
            data = comparison.model_dump()
            data["regressions"] = comparison.regressions
            typer.echo(json.dumps(data, ensure_ascii=False))
        else:
            print_comparison(comparison, console())
        if fail_on_regression and comparison.regressions:
            raise typer.Exit(1)
