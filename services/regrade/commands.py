"""`passk regrade --run-id ID [--errors-only]`: options, then `regrading` (the trials
chosen, the requests sent, the new verdicts awaited), then `render`."""

from __future__ import annotations

import typer

from services.clikit import BROKER_WAIT, console
from services.contract.exits import CliError, ExitCode

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def regrade(
    run_id: str = typer.Option(..., "--run-id", help="the run whose trials to grade again"),
    errors_only: bool = typer.Option(
        False, "--errors-only", help="only the trials whose newest verdict is `error`"
    ),
    await_verdicts: float = typer.Option(
        0,
        "--await-verdicts",
        min=0,
        help="then wait up to this many seconds for every new verdict in the projection",
    ),
    sample: float = typer.Option(
        None,
        "--sample",
        min=0.0,
        max=1.0,
        help="backfill: only the production trials whose LLM judges the sample left "
        "out (not_sampled) and that are in the sample at this rate; they are "
        "judged now (1.0: all of them)",
    ),
    wait: float | None = BROKER_WAIT,
) -> None:
    """Grade a run's trials again from the log (say, after a judge outage longer than
    PASSK_JUDGE_WAIT_S): the gate and the judge grade each trial's input events again
    as attempt N+1, and its new verdict supersedes the old one in the report, the
    windows and the gauges, while the projection's history keeps both. Exit 3 when
    no trial is to be re-graded, 1 when a trial's conversation is not in the log or
    a new verdict did not come within --await-verdicts."""
    from services.contract.settings import get_settings
    from services.regrade.regrading import await_regraded, choose, request
    from services.regrade.render import (
        print_regraded,
        print_requests,
        step_progress,
        verdict_progress,
    )
    from services.storage.store import Store

    settings = get_settings()
    out = console()
    store = Store(settings.database_url)
    chosen = choose(store, run_id, errors_only=errors_only, sample=sample)
    prepared = request(
        settings,
        chosen,
        errors_only=errors_only,
        sample=sample,
        wait=wait,
        track=step_progress(console(stderr=True)),
    )
    print_requests(prepared, run_id, out)
    sent = [p.target for p in prepared if p.payload is not None]
    if await_verdicts and sent:
        with verdict_progress(out, len(sent)) as on_count:
            done = await_regraded(store, run_id, sent, await_verdicts, on_count)
        print_regraded(sent, done, out)
        if len(done) < len(sent):
            raise CliError(
                f"timed out after {await_verdicts:g} s: {len(done)} of "
                f"{len(sent)} re-graded verdicts are in the projection",
                ExitCode.NO,
            )
    if len(sent) < len(prepared):
        raise CliError(
            f"{len(prepared) - len(sent)} of {len(prepared)} trials could not "
            "be re-graded (see the table)",
            ExitCode.NO,
        )


def register(app: typer.Typer) -> None:
    app.command()(regrade)
