"""What `passk replay` and `passk generate` print, with rich: the progress of a replay, its
summary and the lines it skipped or could not deliver, the generated run's table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.replay.replay import ReplaySummary, Track

if TYPE_CHECKING:  # the generator loads only for `passk generate`
    from services.replay.generate import Traffic

SHOWN = 10  # skipped lines / failures listed one by one; the rest are counted


def plain(console: Console, text: str, style: str | None = None) -> None:
    # Line numbers and reasons stay on one line whatever the terminal width: people grep them.
    console.print(text, style=style, soft_wrap=True, markup=False, highlight=False)


def line_progress(err: Console, description: str) -> Track:
    """A progress bar over a file's lines, on `err`."""

    @contextmanager
    def track(total: int) -> Iterator[Callable[[int], None]]:
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=err, transient=False) as progress:
            task = progress.add_task(description, total=total)

            def advance(lineno: int) -> None:
                progress.update(task, completed=lineno)

            yield advance

    return track


def replay_table(summary: ReplaySummary, file: Path, total: int) -> Table:
    dry_run = summary.dry_run
    table = Table(title=f"replay of {file}" + (" (dry run)" if dry_run else ""))
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_row("lines", str(summary.lines))
    if summary.blank:
        table.add_row("blank lines", str(summary.blank))
    for topic, valid in sorted(summary.valid.items()):
        label = "would send" if dry_run else "delivered"
        shown = valid if dry_run else summary.sent.get(topic, 0)
        table.add_row(f"{label} → {topic}", f"{shown}/{valid}" if not dry_run else str(shown))
    table.add_row("skipped (invalid)", str(len(summary.skipped)))
    if not dry_run:
        table.add_row("not delivered", str(len(summary.undelivered)))
    if summary.interrupted:
        table.add_row("stopped after line", f"{summary.last_line} of {total}")
    return table


def print_replay(
    summary: ReplaySummary, file: Path, total: int, console: Console, err: Console
) -> None:
    """The summary table, then on `err` the lines skipped and not delivered (the first
    SHOWN of each) and the one line that says how it ended."""
    console.print(replay_table(summary, file, total))
    for skipped in summary.skipped[:SHOWN]:
        plain(err, f"skipped {skipped}", "yellow")
    if len(summary.skipped) > SHOWN:
        plain(err, f"... and {len(summary.skipped) - SHOWN} more skipped lines", "yellow")
    for undelivered in summary.undelivered[:SHOWN]:
        plain(err, f"not delivered: {undelivered}", "red")
    if len(summary.undelivered) > SHOWN:
        plain(err, f"... and {len(summary.undelivered) - SHOWN} more not delivered", "red")
    again = (
        f"replay {file} again to send the rest: events keep their ids, and the "
        "pipeline drops the repeats of lines already delivered"
    )
    first = summary.undelivered[0] if summary.undelivered else None
    if summary.exit_code == 130:
        gone = f"; {len(summary.undelivered)} not delivered, the first {first.ref}" if first else ""
        plain(
            err,
            f"stopped after line {summary.last_line} of {total}: "
            f"{summary.delivered} line(s) delivered{gone}; {again}",
            "yellow",
        )
    elif summary.exit_code == 4 and first is not None:
        plain(
            err,
            f"error: {len(summary.undelivered)} valid line(s) not delivered, the "
            f"first {first.ref} ({first.why}); {again}",
            "bold red",
        )
    elif summary.exit_code == 3:
        plain(err, f"error: no valid line in {file}: nothing was sent", "bold red")
    elif summary.skipped:
        rest = "the other lines are valid" if summary.dry_run else "every valid line was sent"
        plain(err, f"warning: {len(summary.skipped)} invalid line(s) skipped; {rest}", "yellow")


def print_generated(
    traffic: Traffic, seed: int, out: Path, expected: Path, console: Console
) -> None:
    """Each scenario's trials, expected passes, failure modes and quirks; where it went."""
    run_id = traffic.expected.run_id
    table = Table(title=f"generated run {run_id} (seed {seed}; passes = expected)")
    for column in ("scenario", "k", "trials", "passes", "failure modes", "quirks"):
        numeric = column in ("k", "trials", "passes")
        table.add_column(column, justify="right" if numeric else "left", overflow="fold")
    for row in traffic.expected.scenarios:
        mine = [t for t in traffic.expected.trials if t.scenario_id == row.scenario_id]
        modes = Counter(t.failure_mode for t in mine if t.failure_mode)
        quirks = Counter(q for t in mine for q in t.quirks)
        table.add_row(
            row.scenario_id,
            str(row.k),
            str(row.n),
            f"{row.passed}/{row.n}",
            "\n".join(f"{m} ×{c}" for m, c in sorted(modes.items())) or "-",
            "\n".join(f"{q} ×{c}" for q, c in sorted(quirks.items())) or "-",
        )
    console.print(table)
    plain(console, f"{len(traffic.events)} events → {out}; expected outcomes → {expected}")
