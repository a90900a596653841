"""`passk regrade --run-id ID [--errors-only]`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.clikit import BROKER_WAIT
from services.contract.exits import CliError, ExitCode, NothingToJudge

if TYPE_CHECKING:
    from rich.console import Console

    from services.regrade.plan import Target
    from services.storage.store import Store

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def register(app: typer.Typer) -> None:
    @app.command()
    def regrade(
        run_id: str = typer.Option(..., "--run-id", help="the run whose trials to grade again"),
        errors_only: bool = typer.Option(
            False, "--errors-only", help="only the trials whose newest verdict is `error`"),
        await_verdicts: float = typer.Option(
            0, "--await-verdicts", min=0,
            help="then wait up to this many seconds for every new verdict in the projection"),
        sample: float = typer.Option(
            None, "--sample", min=0.0, max=1.0,
            help="backfill: only the production trials whose LLM judges the sample left "
                 "out (not_sampled) and that are in the sample at this rate; they are "
                 "judged now (1.0: all of them)"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Grade a run's trials again from the log (say, after a judge outage longer than
        PASSK_JUDGE_WAIT_S): the gate and the judge grade each trial's input events again
        as attempt N+1, and its new verdict supersedes the old one in the report, the
        windows and the gauges, while the projection's history keeps both. Exit 3 when
        no trial is to be re-graded, 1 when a trial's conversation is not in the log or
        a new verdict did not come within --await-verdicts."""
        from services.clikit import console as make_console
        from services.contract.settings import get_settings
        from services.kafka.reach import require_broker
        from services.regrade.plan import targets
        from services.regrade.request import request_regrades
        from services.storage.store import Store

        settings = get_settings()
        console = make_console()
        store = Store(settings.database_url)
        only = None
        if sample is not None:
            from services.regrade.plan import left_out

            only = left_out(store.judge_verdicts(run_id), sample)
        chosen = targets(store.trials(run_id), store.history(run_id), errors_only=errors_only,
                         only=only)
        if not chosen:
            which = "no trial ended `error`" if errors_only else "it has no trials"
            if sample is not None:
                which = f"no trial the sample left out is in the sample at {sample:g}"
            raise NothingToJudge(f"nothing to re-grade in run {run_id!r}: {which}")
        require_broker(wait, settings)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=make_console(stderr=True)) as progress:
            tasks: dict[str, Any] = {}

            def advance(step: str, done: int, total: int | None) -> None:
                if step not in tasks:
                    tasks[step] = progress.add_task(step, total=total)
                progress.update(tasks[step], completed=done, total=total)

            reason = "passk regrade" + (" --errors-only" if errors_only else "") + (
                f" --sample {sample:g}" if sample is not None else "")
            prepared = request_regrades(settings, chosen, reason=reason, progress=advance,
                                        sample_rate=sample)
        table = Table("trial", "scenario", "was", "attempt", "request",
                      title=f"re-grades requested for run {run_id}")
        for p in prepared:
            t = p.target
            table.add_row(t.identity.trial_id, t.identity.scenario_id, t.outcome,
                          f"{t.attempt} -> {t.attempt + 1}", p.status)
        console.print(table)
        sent = [p.target for p in prepared if p.payload is not None]
        if await_verdicts and sent:
            _await(store, run_id, sent, await_verdicts, console)
        if len(sent) < len(prepared):
            raise CliError(f"{len(prepared) - len(sent)} of {len(prepared)} trials could not "
                           "be re-graded (see the table)", ExitCode.NO)

    def _await(store: Store, run_id: str, sent: list[Target], timeout_s: float,
               console: Console) -> None:
        from services.regrade.plan import regraded

        deadline = time.monotonic() + timeout_s
        done: dict[str, str] = {}
        columns = (TextColumn("new verdicts"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            task = progress.add_task("verdicts", total=len(sent))
            while True:
                done = regraded(sent, store.history(run_id))
                progress.update(task, completed=len(done))
                if len(done) >= len(sent) or time.monotonic() >= deadline:
                    break
                time.sleep(1.0)
        table = Table("trial", "was", "now", title="re-graded verdicts")
        for t in sent:
            trial_id = t.identity.trial_id
            table.add_row(trial_id, t.outcome, done.get(trial_id, "(not yet)"))
        console.print(table)
        if len(done) < len(sent):
            raise CliError(f"timed out after {timeout_s:g} s: {len(done)} of {len(sent)} "
                           "re-graded verdicts are in the projection", ExitCode.NO)
