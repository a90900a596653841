"""What `passk run` prints, with rich: the progress of the trials, the run's summary (or
its JSON), the adaptive run's standings, and the line that says how it ended."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.contract.exits import ExitCode
from services.harness.adaptive_run import AdaptiveResult
from services.harness.domain import PlannedTrial, RunSummary
from services.harness.drive import Say

SHOWN = 10


def plain(console: Console, text: str, style: str | None = None) -> None:
    console.print(text, style=style, soft_wrap=True, markup=False, highlight=False)


def sayer(console: Console) -> Say:
    return lambda text, style: plain(console, text, style)


class _Progress:
    def __init__(self, progress: Progress, description: str, total: int | None):
        self._progress = progress
        self._task = progress.add_task(description, total=total)

    def planned(self, todo: list[PlannedTrial]) -> None:
        self._progress.update(self._task, total=len(todo))

    def trial(self, trial_id: str, what: str) -> None:
        self._progress.advance(self._task)

    def round(self, number: int, given: dict[str, int]) -> None:
        self._progress.console.print(
            f"round {number}: " + ", ".join(f"{sid} +{count}" for sid, count in given.items()),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@contextmanager
def trial_progress(err: Console, description: str, total: int | None) -> Iterator[_Progress]:
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=False) as progress:
        yield _Progress(progress, description, total)


def run_table(summary: RunSummary, run_id: str) -> Table:
    table = Table(title=f"passk run {run_id}")
    table.add_column("")
    table.add_column("trials", justify="right")
    table.add_row("planned", str(summary.planned))
    table.add_row("already in the log (skipped)", str(summary.skipped))
    table.add_row("run", str(summary.run))
    for exit_reason, count in sorted(summary.exits.items()):
        table.add_row(f"  exit {exit_reason}", str(count))
    table.add_row("persisted session found", str(summary.sessions_found))
    table.add_row("published", str(summary.published))
    if summary.not_published:
        table.add_row("NOT published", str(summary.not_published))
    if summary.undelivered:
        table.add_row("  of which not delivered (broker)", str(len(summary.undelivered)))
    if summary.interrupted:
        table.add_row("interrupted (nothing sent)", str(summary.interrupted))
    return table


def run_json(summary: RunSummary, run_id: str) -> str:
    return json.dumps(
        {
            "run_id": run_id,
            "planned": summary.planned,
            "skipped": summary.skipped,
            "run": summary.run,
            "exits": dict(sorted(summary.exits.items())),
            "sessions_found": summary.sessions_found,
            "published": summary.published,
            "not_published": summary.not_published,
            "interrupted": summary.interrupted,
            "undelivered": summary.undelivered,
            "errors": [{"trial_id": t, "reason": r} for t, r in summary.errors],
        }
    )


def _errors(summary: RunSummary, err: Console) -> None:
    for trial_id, reason in summary.errors[:SHOWN]:
        plain(err, f"{trial_id}: {reason}", "yellow")
    if len(summary.errors) > SHOWN:
        plain(err, f"... and {len(summary.errors) - SHOWN} more", "yellow")


def print_run(
    summary: RunSummary, run_id: str, console: Console, err: Console, as_json: bool
) -> None:
    """The summary table (or JSON), the trials' errors, and how the run ended."""
    if as_json:
        typer.echo(run_json(summary, run_id))
    else:
        console.print(run_table(summary, run_id))
    _errors(summary, err)
    code = summary.exit_code()
    again = "run the same --run-id again: it runs only the trials not in the log"
    undelivered = (
        f"{len(summary.undelivered)} trial(s) not delivered to the broker, "
        f"the first {summary.undelivered[0]}"
        if summary.undelivered
        else ""
    )
    if code == ExitCode.UNREACHABLE:
        plain(err, f"error: {undelivered}; {again}", "bold red")
    elif code == ExitCode.NO:
        plain(
            err,
            f"error: {summary.not_published} trial(s) could not be published; {again}",
            "bold red",
        )
    elif code == 130:
        plain(
            err,
            f"stopped: {summary.published} trial(s) published, "
            f"{summary.interrupted} not run (nothing of them sent)"
            + (f", {undelivered}" if undelivered else "")
            + f"; {again}",
            "yellow",
        )


def print_adaptive(result: AdaptiveResult, console: Console, err: Console, as_json: bool) -> None:
    """The adaptive run's answer: each scenario's interval and decision, the budget, what
    a fixed plan would have spent; then the trials' errors and how it ended."""
    summary = result.summary
    fixed = result.fixed_plan_trials
    if as_json:
        typer.echo(json.dumps(result.as_json()))
    else:
        table = Table(
            title=f"passk run {result.run_id} (adaptive, goal per scenario, "
            f"{result.credibility:.0%} interval)"
        )
        for name in (
            "scenario",
            "n",
            "passed",
            "failed",
            "errors",
            "invalid",
            "pass^k",
            "interval",
            "goal",
            "decision",
        ):
            table.add_column(name, justify="left" if name == "scenario" else "right")
        for s in result.standings:
            table.add_row(
                s.scenario_id,
                str(s.n),
                str(s.passed),
                str(s.failed),
                str(s.errors),
                str(s.invalid),
                "-" if s.pass_hat_k is None else f"{s.pass_hat_k:.3f}",
                f"[{s.lower:.3f}, {s.upper:.3f}]",
                f"{s.goal:g}",
                s.decision,
            )
        console.print(table)
        ratio = f" ({result.trials_run / fixed:.0%} of it)" if fixed else ""
        plain(
            console,
            f"trials run: {result.trials_run} of a budget of {result.budget} "
            f"({result.added} now, in {result.rounds} round(s)); a fixed plan "
            f"reaching the same interval widths: {fixed}{ratio}",
        )
    _errors(summary, err)
    if summary.not_published:
        plain(
            err,
            f"error: {summary.not_published} trial(s) could not be published; "
            "run the same --run-id again to retry them",
            "bold red",
        )
    elif summary.interrupted:
        plain(
            err,
            f"stopped: {summary.interrupted} trial(s) not run, nothing of them "
            "sent; run the same --run-id again to go on",
            "yellow",
        )
    elif result.late:
        plain(
            err,
            f"error: {len(result.late)} trial(s) have no verdict yet (e.g. "
            f"{result.late[0]}); is the pipeline running? Run the same --run-id "
            "again to go on",
            "bold red",
        )
