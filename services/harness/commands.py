"""`passk run`: drive an agent through every scenario k times and publish the trials."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.contract.exits import BROKER_WAIT, ExitCode, UsageError

# Imports inside functions here are deferred: every command module loads on each `passk` run.

SHOWN = 10


def _plain(console, text: str, style: str | None = None) -> None:  # type: ignore[no-untyped-def]
    console.print(text, style=style, soft_wrap=True, markup=False, highlight=False)


def register(app: typer.Typer) -> None:
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
        wait: float | None = BROKER_WAIT,
        as_json: bool = typer.Option(False, "--json",
                                     help="print the summary as one JSON object"),
    ) -> None:
        """Run each scenario max(--trials, k) times against the agent with its simulated
        user, read the product's persisted session with the target's state probe, and
        publish both events per trial (trial ids <run_id>:<scenario_id>:<NNN>; trials of
        this run already in the log are skipped, so a re-run publishes nothing twice).
        Exit 4 when the broker is down or did not take a trial (within
        PASSK_PRODUCER_DELIVERY_TIMEOUT_S; the first such trial is named), 1 when a trial
        could not be published for another reason, 2 for invalid scenarios or target, 130
        when stopped (SIGINT: finished trials are published, with a summary)."""
        from services.contract.exits import Unreachable
        from services.contract.exits import console as make_console
        from services.contract.settings import get_settings
        from services.contract.topics import Topic, topic_name
        from services.grading.scenario_loader import validate_paths
        from services.harness.adapters import make_client
        from services.harness.domain import AgentError, plan_trials
        from services.harness.log import published_trials, publisher
        from services.harness.probes import make_probe
        from services.harness.runner import Harness, UserFactory
        from services.harness.target import InvalidTarget, load_target
        from services.kafka.producer import TrafficProducer
        from services.kafka.reach import require_broker

        settings = get_settings()
        console, err = make_console(), make_console(stderr=True)
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
        users = UserFactory()
        if any(s.user and s.user.script is None for s in loaded.scenarios):
            from openai import AsyncOpenAI

            stand_in = not settings.openai_api_key and not settings.openai_base_url
            base_url = settings.openai_base_url or None
            if stand_in:
                base_url = f"http://127.0.0.1:{os.environ.get('PASSK_STANDIN_PORT', '8400')}/v1"
            users = UserFactory(
                AsyncOpenAI(base_url=base_url, api_key=settings.openai_api_key or "stand-in",
                            max_retries=2),
                "passk-standin" if stand_in else (user_model or settings.judge_model),
                stand_in)
            if stand_in:
                _plain(err, f"users without a script are played by the offline stand-in "
                            f"(not a model) at {base_url}", "yellow")

        # Kafka errors escape to services.cli: one line, exit 4.
        done = published_trials(run_id, settings)
        plan = plan_trials(loaded.scenarios, run_id, trials)
        todo = [p for p in plan if p.trial_id not in done]
        producer = TrafficProducer(settings)
        stop_waiting = threading.Event()
        try:
            missing = producer.missing_topics([topic_name(t, settings) for t in (
                Topic.CONVERSATION_FINISHED, Topic.SESSION_PERSISTED)])
            if missing:
                raise Unreachable(f"missing topics: {', '.join(missing)}; nothing sent "
                                  "(create them with `passk topics create`)")
            try:
                agent = make_client(chosen.agent)
            except AgentError as exc:
                raise UsageError(f"{target}: agent: {exc.reason}") from None
            probe = make_probe(chosen.state)
            columns = (TextColumn("[bold]{task.description}"), BarColumn(),
                       MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(*columns, console=err, transient=False) as progress:
                task = progress.add_task(f"run {run_id}", total=len(todo))
                harness = Harness(
                    run_id=run_id, agent=agent, probe=probe, users=users,
                    publish=publisher(producer, stop_waiting),
                    timeout_s=chosen.agent.timeout_s, agent_version=agent_version,
                    concurrency=concurrency, stop_waiting=stop_waiting,
                    on_trial=lambda trial_id, what: progress.advance(task))
                harness.summary.planned = len(plan)
                harness.summary.skipped = len(plan) - len(todo)

                async def main() -> None:
                    try:
                        await harness.run(todo)
                    finally:
                        await agent.close()
                        await probe.close()
                        if users.model_client is not None:
                            await users.model_client.close()

                asyncio.run(main())
            summary = harness.summary
        finally:
            # Every publish has had its wait (bounded); what is left is given up at once.
            producer.close(timeout_s=0)

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
