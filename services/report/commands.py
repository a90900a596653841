"""`passk wait`, `passk show`, `passk report`, `passk gate` (the deploy gate), `passk
compare`, `passk windows` and `passk dead-letters`: options, then one function of the
report's modules for the answer, then one renderer (`render`, or JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from services.clikit import BROKER_WAIT, console
from services.contract.exits import ExitCode, NothingToJudge, UsageError
from services.contract.settings import get_settings

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def _database(database_url: str | None) -> str:
    return database_url or get_settings().database_url


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc}") from exc


def wait(
    run_id: str = typer.Option(..., "--run-id", help="the run to wait for"),
    expected: Path | None = typer.Option(
        None, help="expected.json written by `passk generate`: check every outcome"
    ),
    trials: int | None = typer.Option(None, help="how many trials to wait for"),
    timeout: float = typer.Option(600, help="give up after this many seconds"),
) -> None:
    """Wait until every trial of a run has its verdict in the projection."""
    from services.report.render import print_wrong_outcomes, verdict_progress
    from services.report.wait import await_verdicts, compare, expected_outcomes

    out = console()
    wanted = expected_outcomes(expected)
    total = len(wanted) if wanted is not None else trials
    if not total:
        raise typer.BadParameter("give --expected or --trials")
    with verdict_progress(out, total) as on_count:
        outcomes = await_verdicts(
            _database(None), run_id, total, timeout=timeout, on_count=on_count
        )
    if len(outcomes) < total:
        console(stderr=True).print(
            f"[red]error: timed out after {timeout:g} s: {len(outcomes)} of {total} "
            "trials have a verdict[/red]"
        )
        raise typer.Exit(1)
    if wanted is None:
        return
    wrong = compare(wanted, outcomes)
    print_wrong_outcomes(wanted, wrong, out)
    if wrong:
        raise typer.Exit(1)


def show(
    trial_id: str = typer.Argument(..., help="the trial to open"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    database_url: str = typer.Option(None, help="default: PASSK_DATABASE_URL"),
) -> None:
    """One trial from the projection: its transcript, every check with its verdict and
    reason, and the persisted state beside each expectation (the failing paths marked).
    Exit 3 when the projection has no such trial, 4 when the store is unreachable."""
    from services.report.load import load_trial
    from services.report.render import print_view
    from services.report.trial_view import view_json

    view = load_trial(trial_id, _database(database_url), get_settings())
    if as_json:
        typer.echo(json.dumps(view_json(view), ensure_ascii=False))
    else:
        print_view(view, console())


def report(
    run_id: str = typer.Option(..., "--run-id", help="the run to report on"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    html: Path = typer.Option(
        None,
        "--html",
        help="also write one self-contained page (charts inlined) here",
        dir_okay=False,
    ),
    database_url: str = typer.Option(None, help="default: PASSK_DATABASE_URL"),
) -> None:
    """pass@k and pass^k per scenario of a run, and the checks that fail most."""
    from services.report.domain import report_json
    from services.report.load import report_page, run_report
    from services.report.render import print_report

    settings, url = get_settings(), _database(database_url)
    result = run_report(run_id, url, settings)
    if as_json:
        typer.echo(json.dumps(report_json(result), ensure_ascii=False))
    else:
        print_report(result, console())
    if html is not None:
        _write(html, report_page(result, url, settings))
        console(stderr=True).print(f"report page: {html.resolve()}", soft_wrap=True)


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
    from services.report.load import load_report
    from services.report.render import print_gate

    result, _, _ = load_report(run_id, _database(database_url), get_settings())
    decision = gate_decision(result, expect_scenarios)
    print_gate(decision, console(stderr=decision.exit_code == ExitCode.NOTHING_TO_JUDGE))
    raise typer.Exit(decision.exit_code)


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
    from services.report.load import compare_reports
    from services.report.render import print_comparison

    comparison = compare_reports(base, run, _database(database_url), get_settings())
    if as_json:
        data = comparison.model_dump()
        data["regressions"] = comparison.regressions
        typer.echo(json.dumps(data, ensure_ascii=False))
    else:
        print_comparison(comparison, console())
    if fail_on_regression and comparison.regressions:
        raise typer.Exit(1)


def windows(
    last: int = typer.Option(6, "--last", min=1, help="windows per scenario and size"),
    window: str = typer.Option(
        None, "--window", help="one window size (e.g. 1h); default: every size"
    ),
    runs: str = typer.Option(
        None,
        "--runs",
        help="run ids to show: comma-separated "
        "globs or prefixes (production-*); '*' every run; default: "
        "every run but make demo's (demo-*) and passk ci's (ci-*)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    html: Path = typer.Option(
        None, "--html", dir_okay=False, help="also write a page of pictures over time here"
    ),
    database_url: str = typer.Option(None, help="default: PASSK_DATABASE_URL"),
) -> None:
    """The latest windows per scenario: pass^k with its credible interval, pass@k, n,
    errors apart, the sampled trials' figures, and whether the reliability-drop alert's
    condition held. Of every run but make demo's and passk ci's unless --runs says.
    Exit 3 when the projection holds no window (of those runs) yet."""
    from services.report.over_time import windows_json
    from services.report.render import print_windows
    from services.report.windows import load_windows

    try:
        items = load_windows(_database(database_url), last, window, runs=runs)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if not items:
        raise NothingToJudge(
            "no windows in the projection yet (is the sink running, and "
            "has the aggregate published any?)"
        )
    if as_json:
        typer.echo(json.dumps(windows_json(items), ensure_ascii=False))
    else:
        print_windows(items, console())
    if html is not None:
        from datetime import UTC, datetime

        from services.report.over_time import render_windows_page

        _write(html, render_windows_page(items, generated_at=datetime.now(UTC)))
        console(stderr=True).print(f"windows page: {html.resolve()}", soft_wrap=True)


def dead_letters(
    since: str = typer.Option(
        None, "--since", help="only letters this recent (a duration: 90m, 2h, 1d)"
    ),
    reason: str = typer.Option(
        None, "--reason", help="only letters of this reason, e.g. no_matching_scenario"
    ),
    limit: int = typer.Option(
        1000, "--limit", min=1, help="list at most the newest N (every letter is counted)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    wait: float | None = BROKER_WAIT,
) -> None:
    """Every dead letter, and every trace the OTLP receiver or `passk import otel` did
    not take, with its reason, source, key and an excerpt; counts per reason. Exit 4
    when the broker is down."""
    from services.report.dead_letters import list_dead_letters
    from services.report.render import print_dead_letters

    listing = list_dead_letters(get_settings(), since=since, reason=reason, limit=limit, wait=wait)
    if as_json:
        typer.echo(json.dumps(listing.as_json(), ensure_ascii=False))
    else:
        print_dead_letters(listing, console())


def register_wait(app: typer.Typer) -> None:
    app.command()(wait)


def register(app: typer.Typer) -> None:
    for command in (show, report, gate, compare):
        app.command()(command)


def register_windows(app: typer.Typer) -> None:
    app.command()(windows)


def register_dead_letters(app: typer.Typer) -> None:
    app.command("dead-letters")(dead_letters)
