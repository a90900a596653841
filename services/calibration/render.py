"""What `passk calibrate` prints, with rich: the judges' confusion matrices and status,
per dimension, every miss; a judge's history; the problems in the sets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from services.calibration.calibrate import JudgeCalibrationResult
    from services.calibration.sets import SetProblem
    from services.calibration.store import CalibrationRow
    from services.grading.calibration import Bar, Matrix


def _figure(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def error(message: str) -> None:
    """`error: <message>` on stderr, the word in red on a terminal."""
    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)


def print_problems(problems: Sequence[SetProblem], colour: str) -> None:
    for p in problems:
        Console(stderr=True).print(
            f"[{colour}]{escape(p.file)}:{p.line or ''}[/{colour}] {escape(p.problem)}",
            soft_wrap=True,
        )


def print_results(
    results: list[JudgeCalibrationResult], dims: dict[str, Matrix], bar: Bar, console: Console
) -> None:
    table = Table(
        title=f"judge calibration (positive = the judge flags a failure; "
        f"bar: precision >= {bar.precision:g} on >= {bar.min_labelled} labels)"
    )
    for name in ("judge", "version"):
        table.add_column(name, overflow="fold")
    for name in ("TP", "FP", "FN", "TN", "errors", "n", "precision", "recall"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("why", overflow="fold")
    for r in results:
        c = r.calibration
        status = "[green]gating[/green]" if c.gating else "[yellow]advisory[/yellow]"
        table.add_row(
            escape(c.judge_id),
            c.judge_version,
            str(c.tp),
            str(c.fp),
            str(c.fn),
            str(c.tn),
            str(c.errors),
            str(c.n),
            _figure(c.precision),
            _figure(c.recall),
            status,
            escape(c.reason),
        )
    console.print(table)
    if dims:
        per = Table(title="per dimension")
        for name in ("dimension", "TP", "FP", "FN", "TN", "errors", "n", "precision", "recall"):
            per.add_column(name)
        for dim, m in sorted(dims.items()):
            per.add_row(
                escape(dim),
                str(m.tp),
                str(m.fp),
                str(m.fn),
                str(m.tn),
                str(m.errors),
                str(m.n),
                _figure(m.precision),
                _figure(m.recall),
            )
        console.print(per)
    for r in results:
        for miss in r.misses:
            colour = "red" if miss.kind == "error" else "yellow"
            console.print(
                f"[{colour}]{miss.kind}[/{colour}] {escape(r.calibration.judge_id)} item "
                f"{escape(miss.item_id)}: human {miss.label}, judge {miss.judge_result} — "
                f"{escape(miss.judge_reason)}\n    {escape(miss.excerpt)}"
                + (f"\n    note: {escape(miss.note)}" if miss.note else ""),
                soft_wrap=True,
            )


def print_history(judge_id: str, rows: Sequence[CalibrationRow], console: Console) -> None:
    table = Table(title=f"calibration history of {judge_id} (oldest first)")
    for name in ("at", "version", "source", "n", "precision", "recall", "status", "why"):
        table.add_column(name)
    for r in rows:
        table.add_row(
            r.occurred_at.isoformat(timespec="seconds"),
            r.judge_version,
            r.source,
            str(r.n),
            _figure(r.precision),
            _figure(r.recall),
            "gating" if r.gating else "advisory",
            escape(r.reason),
        )
    console.print(table)
