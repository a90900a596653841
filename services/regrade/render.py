"""What `passk regrade` prints, with rich: the progress of each step, the requests, the
new verdicts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

if TYPE_CHECKING:
    from services.regrade.plan import Prepared, Target
    from services.regrade.request import Progress as Steps


def step_progress(err: Console) -> Callable[[], Any]:
    """A bar per step of the requests (reading the log, sending), on `err`."""

    @contextmanager
    def track() -> Iterator[Steps]:
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=err) as progress:
            tasks: dict[str, Any] = {}

            def advance(step: str, done: int, total: int | None) -> None:
                if step not in tasks:
                    tasks[step] = progress.add_task(step, total=total)
                progress.update(tasks[step], completed=done, total=total)

            yield advance

    return track


def print_requests(prepared: list[Prepared], run_id: str, console: Console) -> None:
    table = Table(
        "trial",
        "scenario",
        "was",
        "attempt",
        "request",
        title=f"re-grades requested for run {run_id}",
    )
    for p in prepared:
        t = p.target
        table.add_row(
            t.identity.trial_id,
            t.identity.scenario_id,
            t.outcome,
            f"{t.attempt} -> {t.attempt + 1}",
            p.status,
        )
    console.print(table)


@contextmanager
def verdict_progress(console: Console, total: int) -> Iterator[Callable[[int], None]]:
    columns = (TextColumn("new verdicts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("verdicts", total=total)
        yield lambda n: progress.update(task, completed=n)


def print_regraded(sent: list[Target], done: dict[str, str], console: Console) -> None:
    table = Table("trial", "was", "now", title="re-graded verdicts")
    for t in sent:
        trial_id = t.identity.trial_id
        table.add_row(trial_id, t.outcome, done.get(trial_id, "(not yet)"))
    console.print(table)
