"""`passk run`: drive an agent through every scenario k times and publish the trials."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.clikit import BROKER_WAIT
from services.contract.exits import ExitCode, UsageError

# Imports inside functions here are deferred: every command module loads on each `passk` run.

SHOWN = 10


def _plain(console, text: str, style: str | None = None) -> None:  # type: ignore[no-untyped-def]
    console.print(text, style=style, soft_wrap=True, markup=False, highlight=False)


def register(app: typer.Typer, *,
             publish: Callable[[Sequence[Any], Any], list[tuple[str, str]]]) -> None:
    """`publish(scenarios, settings)`: `passk scenarios publish`'s, handed by the CLI
    (services/cli/wiring.py), for `passk run --publish`; it returns (id, status) pairs."""

    @app.command()
    def run(
        scenarios: Path = typer.Option(..., "--scenarios", exists=True,
                                       help="scenario YAML files or a directory"),
        target: Path = typer.Option(..., "--target", help="the target file (agent and state)"),
        run_id: str = typer.Option(..., "--run-id", help="the run; trial ids derive from it"),
        trials: int = typer.Option(0, "--trials", min=0, help="trials per scenario (at least k)"),
        concurrency: int = typer.Option(4, "--concurrency", min=1, max=256,
                                        help="trials talking to the agent at once"),
        agent_version: str = typer.Option(None, "--agent-version"),
        user_model: str = typer.Option(
            None, "--user-model", envvar="PASSK_USER_MODEL",
            help="model playing users without a script (default: the judge model, or the "
                 "offline stand-in when no model is configured)"),
        publish_first: bool = typer.Option(
            False, "--publish", help="publish the scenarios first (new or changed ones); "
                                     "without it, an unpublished or changed scenario is exit 2"),
        wait: float | None = BROKER_WAIT,
        as_json: bool = typer.Option(False, "--json",
                                     help="print the summary as one JSON object"),
        adaptive: bool = typer.Option(
            False, "--adaptive", help="after k trials each, give further trials in rounds to "
            "the scenarios whose credible interval of pass^k still holds the goal, widest "
            "first, until none does or --budget trials in all have run"),
        budget: int = typer.Option(None, "--budget", min=1,
                                   help="with --adaptive: trials of the run in all, at most"),
        goal: float = typer.Option(
            None, "--goal", min=0.0, max=1.0,
            help="with --adaptive: the pass^k to decide against (default: each scenario's "
                 "alert target, else PASSK_ALERT_MIN_PASS_HAT_K)"),
        credibility: float = typer.Option(
            0.9, "--credibility", min=0.5, max=0.999,
            help="with --adaptive: the credible interval's mass"),
        batch: int = typer.Option(
            None, "--batch", min=1,
            help="with --adaptive: trials per round at most (default: one per undecided "
                 "scenario)"),
        verdict_timeout: float = typer.Option(
            600.0, "--verdict-timeout", min=1.0,
            help="with --adaptive: how long to wait for a round's verdicts"),
    ) -> None:
        """Run each scenario max(--trials, k) times against the agent with its simulated
        user, read the product's persisted session with the target's state probe, and
        publish both events per trial (trial ids <run_id>:<scenario_id>:<NNN>; trials of
        this run already in the log are skipped, so a re-run publishes nothing twice).
        Each trial names the scenario version (content hash) it ran, and is graded
        against that version: a scenario not published, or whose file differs from its
        latest published version, is exit 2 naming the file, unless --publish.
        Exit 4 when the broker is down or did not take a trial (within
        PASSK_PRODUCER_DELIVERY_TIMEOUT_S; the first such trial is named), 1 when a trial
        could not be published for another reason, 2 for invalid scenarios or target, 130
        when stopped (SIGINT: finished trials are published, with a summary)."""
        from services.clikit import console as make_console
        from services.contract.settings import get_settings
        from services.grading.scenario_loader import validate_paths
        from services.harness.play import play, unpinned, users_for
        from services.harness.target import InvalidTarget, load_target
        from services.kafka.catalog import load_catalog
        from services.kafka.reach import require_broker

        settings = get_settings()
        console, err = make_console(), make_console(stderr=True)
        if adaptive and budget is None:
            raise UsageError("--adaptive needs --budget N (trials of the run in all)")
        if not adaptive and any(v is not None for v in (budget, goal, batch)):
            raise UsageError("--budget, --goal and --batch go with --adaptive")
        loaded = validate_paths([scenarios])
        if loaded.errors:
            for error in loaded.errors:
                _plain(err, str(error), "red")
            raise UsageError(f"{len(loaded.errors)} problem(s) in {scenarios}: nothing was run")
        for warning in loaded.warnings:
            _plain(err, f"warning: {warning}", "yellow")
        without_user = [s.id for s in loaded.scenarios if s.user is None]
        if without_user:
            raise UsageError(f"{scenarios}: scenario(s) without a `user:` section, so no "
                             f"user to play: {', '.join(without_user)}; nothing was run")
        if not loaded.scenarios:
            raise UsageError(f"no scenario in {scenarios}")
        try:
            chosen = load_target(target, os.environ)
        except InvalidTarget as exc:
            raise UsageError(f"invalid target file {exc.file}: field {exc.field}: "
                             f"{exc.problem}") from None

        require_broker(wait, settings)
        # Kafka errors escape to services.cli: one line, exit 4.
        if publish_first:
            for scenario_id, status in publish(loaded.scenarios, settings):
                if status != "unchanged":
                    _plain(err, f"published {scenario_id} ({status})")
        else:
            stale = unpinned(loaded.scenarios, loaded.sources, load_catalog(settings))
            if stale:
                for problem in stale:
                    _plain(err, str(problem), "red")
                raise UsageError(
                    f"{len(stale)} scenario(s) not as published: their trials would be "
                    f"graded against another version ({', '.join(p.file for p in stale)}); "
                    "publish them (`passk scenarios publish`, or `passk run --publish`); "
                    "nothing was run")
        users, stand_in = users_for(loaded.scenarios, settings, user_model)
        if stand_in:
            _plain(err, stand_in, "yellow")

        columns = (TextColumn("[bold]{task.description}"), BarColumn(),
                   MofNCompleteColumn(), TimeElapsedColumn())
        if adaptive:
            from services.harness.adaptive_run import AdaptiveOptions
            from services.harness.play import play_adaptive

            with Progress(*columns, console=err, transient=False) as progress:
                task = progress.add_task(f"run {run_id} (adaptive)", total=budget)
                try:
                    result = play_adaptive(
                        loaded.scenarios, chosen, run_id, settings, users=users,
                        options=AdaptiveOptions(
                            budget=budget, goal=goal, credibility=credibility, batch=batch,
                            initial=trials, verdict_timeout_s=verdict_timeout),
                        concurrency=concurrency, agent_version=agent_version,
                        on_trial=lambda trial_id, what: progress.advance(task),
                        on_round=lambda number, given: progress.console.print(
                            f"round {number}: " + ", ".join(
                                f"{sid} +{count}" for sid, count in given.items()),
                            markup=False, highlight=False, soft_wrap=True))
                except UsageError as exc:
                    raise UsageError(f"{target}: {exc}") from None
            _adaptive_summary(result, console, err, as_json)
            return
        with Progress(*columns, console=err, transient=False) as progress:
            task = progress.add_task(f"run {run_id}", total=None)
            try:
                summary = play(
                    loaded.scenarios, chosen, run_id, settings, users=users, trials=trials,
                    concurrency=concurrency, agent_version=agent_version,
                    on_plan=lambda todo: progress.update(task, total=len(todo)),
                    on_trial=lambda trial_id, what: progress.advance(task))
            except UsageError as exc:
                raise UsageError(f"{target}: {exc}") from None

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
        if as_json:
            typer.echo(json.dumps({
                "run_id": run_id, "planned": summary.planned, "skipped": summary.skipped,
                "run": summary.run, "exits": dict(sorted(summary.exits.items())),
                "sessions_found": summary.sessions_found, "published": summary.published,
                "not_published": summary.not_published, "interrupted": summary.interrupted,
                "undelivered": summary.undelivered,
                "errors": [{"trial_id": t, "reason": r} for t, r in summary.errors]}))
        else:
            console.print(table)
        for trial_id, reason in summary.errors[:SHOWN]:
            _plain(err, f"{trial_id}: {reason}", "yellow")
        if len(summary.errors) > SHOWN:
            _plain(err, f"... and {len(summary.errors) - SHOWN} more", "yellow")
        code = summary.exit_code()
        again = "run the same --run-id again: it runs only the trials not in the log"
        undelivered = (f"{len(summary.undelivered)} trial(s) not delivered to the broker, "
                       f"the first {summary.undelivered[0]}" if summary.undelivered else "")
        if code == ExitCode.UNREACHABLE:
            _plain(err, f"error: {undelivered}; {again}", "bold red")
        elif code == ExitCode.NO:
            _plain(err, f"error: {summary.not_published} trial(s) could not be published; "
                        f"{again}", "bold red")
        elif code == 130:
            _plain(err, f"stopped: {summary.published} trial(s) published, "
                        f"{summary.interrupted} not run (nothing of them sent)"
                        + (f", {undelivered}" if undelivered else "") + f"; {again}",
                   "yellow")
        raise typer.Exit(code)


def _adaptive_summary(result, console, err, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    """The adaptive run's answer: each scenario's interval and decision, the budget, what a
    fixed plan would have spent; exit 1 when a trial was not published or a verdict never
    came, 130 when stopped."""
    summary = result.summary
    fixed = result.fixed_plan_trials
    if as_json:
        typer.echo(json.dumps(result.as_json()))
    else:
        table = Table(title=f"passk run {result.run_id} (adaptive, goal per scenario, "
                            f"{result.credibility:.0%} interval)")
        for name in ("scenario", "n", "passed", "failed", "errors", "invalid", "pass^k",
                     "interval", "goal", "decision"):
            table.add_column(name, justify="left" if name == "scenario" else "right")
        for s in result.standings:
            table.add_row(s.scenario_id, str(s.n), str(s.passed), str(s.failed),
                          str(s.errors), str(s.invalid),
                          "-" if s.pass_hat_k is None else f"{s.pass_hat_k:.3f}",
                          f"[{s.lower:.3f}, {s.upper:.3f}]", f"{s.goal:g}", s.decision)
        console.print(table)
        ratio = f" ({result.trials_run / fixed:.0%} of it)" if fixed else ""
        _plain(console, f"trials run: {result.trials_run} of a budget of {result.budget} "
                        f"({result.added} now, in {result.rounds} round(s)); a fixed plan "
                        f"reaching the same interval widths: {fixed}{ratio}")
    for trial_id, reason in summary.errors[:SHOWN]:
        _plain(err, f"{trial_id}: {reason}", "yellow")
    if len(summary.errors) > SHOWN:
        _plain(err, f"... and {len(summary.errors) - SHOWN} more", "yellow")
    code = result.exit_code()
    if summary.not_published:
        _plain(err, f"error: {summary.not_published} trial(s) could not be published; "
                    "run the same --run-id again to retry them", "bold red")
    elif summary.interrupted:
        _plain(err, f"stopped: {summary.interrupted} trial(s) not run, nothing of them "
                    "sent; run the same --run-id again to go on", "yellow")
    elif result.late:
        _plain(err, f"error: {len(result.late)} trial(s) have no verdict yet (e.g. "
                    f"{result.late[0]}); is the pipeline running? Run the same --run-id "
                    "again to go on", "bold red")
    raise typer.Exit(code)
