"""What `passk import otel` prints, with rich: its progress, the summary table (or JSON),
the traces skipped, the lines unreadable, the sessions not found, the trials not
delivered, and the line that says how it ended."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from services.otlp.import_files import Imported

SHOWN = 10


def _plain(console: Console, text: str) -> None:
    console.print(text, markup=False, soft_wrap=True, highlight=False)


class _Progress:
    def __init__(self, progress: Progress):
        self._progress = progress
        self._mapping = progress.add_task("mapping traces", total=None)

    def mapping(self, done: int, total: int) -> None:
        self._progress.update(self._mapping, completed=done, total=total)

    def stage(self, description: str, total: int) -> Callable[[], None]:
        task = self._progress.add_task(description, total=total)
        return lambda: self._progress.advance(task)


def import_progress(err: Console) -> Callable[[], Any]:
    @contextmanager
    def shown() -> Iterator[_Progress]:
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn())
        with Progress(*columns, console=err) as progress:
            yield _Progress(progress)

    return shown


def import_table(done: Imported) -> Table:
    plan, dry_run = done.plan, done.dry_run
    table = Table(title="import otel" + (" (dry run)" if dry_run else ""))
    table.add_column("")
    table.add_column("traces", justify="right")
    table.add_row("spans read", str(plan.spans))
    table.add_row("taken (trials)" if not dry_run else "would take (trials)", str(len(plan.taken)))
    table.add_row(
        "  with a persisted session", str(sum(1 for t in plan.taken if t.session is not None))
    )
    if done.probed:
        table.add_row("  of which read by the state probe", str(plan.probed))
        table.add_row("  no session from the state probe", str(len(plan.not_probed)))
    for reason, n in sorted(Counter(s.reason for s in plan.skipped).items()):
        table.add_row(f"skipped: {reason}", str(n))
    if plan.bad_lines:
        table.add_row("unreadable lines / files", str(len(plan.bad_lines)))
    if not dry_run:
        table.add_row("events acknowledged", str(done.acknowledged))
        table.add_row("trials not delivered", str(len(done.undelivered)))
    return table


def import_json(done: Imported) -> str:
    plan, dry_run = done.plan, done.dry_run
    return json.dumps(
        {
            "dry_run": dry_run,
            "spans": plan.spans,
            "taken": len(plan.taken),
            "with_session": sum(1 for t in plan.taken if t.session is not None),
            "probed": plan.probed if done.probed else None,
            "not_probed": len(plan.not_probed) if done.probed else None,
            "skipped": dict(sorted(Counter(s.reason for s in plan.skipped).items())),
            "bad_lines": len(plan.bad_lines),
            "dead_letters": 0 if dry_run else len(plan.letters),
            "acknowledged": None if dry_run else done.acknowledged,
            "undelivered": None if dry_run else done.undelivered,
            "interrupted": done.interrupted,
        }
    )


def print_import(done: Imported, out: Console, err: Console, as_json: bool) -> None:
    """The summary (table or JSON), then on `err` the first SHOWN of each kind of trace,
    line or trial left out, and how it ended (`done.exit_code` says with what)."""
    if as_json:
        typer.echo(import_json(done))
    else:
        out.print(import_table(done))
    plan, undelivered = done.plan, done.undelivered
    for s in plan.skipped[:SHOWN]:
        _plain(err, f"skipped trace {s.trace_id}: {s.reason}: {s.detail}")
    for where, why in plan.bad_lines[:SHOWN]:
        _plain(err, f"unreadable {where}: {why}")
    for trial, why in plan.not_probed[:SHOWN]:
        _plain(err, f"no persisted session for {trial}: {why}")
    for trial in undelivered[:SHOWN]:
        why = done.published.reasons[trial] if done.published is not None else ""
        _plain(err, f"not delivered: {trial}: {why}")
    again = (
        "import the same files again to send the rest: event ids come from the "
        "traces, and the pipeline drops the repeats"
    )
    if done.interrupted:
        gone = (
            f"; {len(undelivered)} trial(s) not delivered, the first {undelivered[0]}"
            if undelivered
            else ""
        )
        _plain(err, f"stopped: {done.acknowledged} event(s) delivered{gone}; {again}")
    elif undelivered:
        _plain(
            err,
            f"error: {len(undelivered)} trial(s) not delivered, the first "
            f"{undelivered[0]}; {again}",
        )
    elif not plan.taken:
        err.print(
            "error: no complete agent trace with passk ids or a matching scenario: nothing to send",
            markup=False,
        )
