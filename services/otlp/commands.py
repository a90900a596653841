"""`passk import otel FILE... [--dry-run]`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from kafka.errors import KafkaError

from services.clikit import BROKER_WAIT
from services.contract.exits import Unreachable

if TYPE_CHECKING:
    from rich.console import Console

    from schemas.scenario import Scenario
    from services.contract.settings import Settings
    from services.otlp.importer import Probe

# Imports inside functions here are deferred: every command module loads on each `passk` run.

SHOWN = 10


def register(app: typer.Typer, *, state_probe: Callable[[Path], Callable[[], Probe]]
             ) -> None:
    """`state_probe(path)`: opens a target file's state probe (the harness's target format,
    handed over by the CLI: services/cli/wiring.py)."""
    importer = typer.Typer(help="Import trials from other formats.", no_args_is_help=True)

    @importer.command("otel")
    def import_otel(
        files: list[Path] = typer.Argument(..., exists=True, dir_okay=False, readable=True,
                                           help="OTLP JSON lines (Collector file exporter) "
                                                "or OTLP protobuf files"),
        dry_run: bool = typer.Option(False, "--dry-run", help="map every trace, send nothing"),
        state_probe_file: Path = typer.Option(
            None, "--state-probe", exists=True, dir_okay=False,
            help="a target file (passk run --target) whose `state:` probe reads the "
                 "persisted session of each trial whose trace has no passk.session.state"),
        wait: float | None = BROKER_WAIT,
        as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object"),
    ) -> None:
        """Publish one ConversationFinished (and a SessionPersisted when the trace carries
        passk.session.state) per complete agent trace: root span
        gen_ai.operation.name=invoke_agent. Event ids come from the trace id, so importing
        a file again grades nothing twice. Exit 3 when no trace was taken, 4 when the
        broker is down or did not take a trial (within PASSK_PRODUCER_DELIVERY_TIMEOUT_S;
        the first such trial is named), 130 when stopped (SIGINT), with a summary. Each
        trace not taken is a dead letter (`passk dead-letters` lists them)."""
        import base64

        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        from rich.table import Table

        from services.clikit import console as make_console
        from services.contract.codec import encode
        from services.contract.settings import get_settings
        from services.contract.topics import Topic, topic_name
        from services.kafka.producer import TrafficProducer
        from services.kafka.reach import require_broker
        from services.otlp.importer import plan_import, publish_plan

        open_probe = state_probe(state_probe_file) if state_probe_file is not None else None
        settings = get_settings()
        out, err = make_console(), make_console(stderr=True)
        if not dry_run:
            require_broker(wait, settings)
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn())
        published = None
        with Progress(*columns, console=err) as progress:
            task = progress.add_task("mapping traces", total=None)
            plan = plan_import(files, lambda i, n: progress.update(task, completed=i, total=n),
                               scenarios=_rules(settings, dry_run, err))
            if open_probe is not None:
                import asyncio

                from services.otlp.importer import probe_sessions

                asking = progress.add_task("state probe", total=sum(
                    1 for t in plan.taken if t.session is None))

                async def ask() -> None:
                    reader = open_probe()
                    try:
                        await probe_sessions(plan, reader,
                                             on_trial=lambda: progress.advance(asking))
                    finally:
                        await reader.close()

                asyncio.run(ask())
            if not dry_run and (plan.taken or plan.letters):
                events = [e for t in plan.taken
                          for e in (t.conversation, t.session) if e is not None]
                send = progress.add_task("publishing", total=len(events) + len(plan.letters))
                letters_topic = topic_name(Topic.DEAD_LETTERS, settings)
                producer = TrafficProducer(settings)
                try:
                    missing = producer.missing_topics(
                        [topic_name(t, settings) for t in (Topic.CONVERSATION_FINISHED,
                                                          Topic.SESSION_PERSISTED,
                                                          Topic.DEAD_LETTERS)])
                    if missing:
                        raise Unreachable(f"missing topics: {', '.join(missing)}; nothing "
                                          "sent (create them with `passk topics create`)")
                    # Nothing dropped in silence: each trace not taken is a dead letter (sent
                    # first; publish_plan waits for every send, these too).
                    for letter in plan.letters:
                        key = base64.b64decode(letter.key_b64) if letter.key_b64 else None
                        producer.send_raw(letters_topic, key, encode(letter),
                                          ref=letter.event_id)
                        progress.advance(send)
                    # Bounded by the producer's deadline; SIGINT ends it with the summary.
                    published = publish_plan(plan, producer,
                                             on_event=lambda: progress.advance(send))
                finally:
                    producer.close(timeout_s=0)  # publish_plan waited already
        table = Table(title="import otel" + (" (dry run)" if dry_run else ""))
        table.add_column("")
        table.add_column("traces", justify="right")
        table.add_row("spans read", str(plan.spans))
        table.add_row("taken (trials)" if not dry_run else "would take (trials)",
                      str(len(plan.taken)))
        with_state = sum(1 for t in plan.taken if t.session is not None)
        table.add_row("  with a persisted session", str(with_state))
        if open_probe is not None:
            table.add_row("  of which read by the state probe", str(plan.probed))
            table.add_row("  no session from the state probe", str(len(plan.not_probed)))
        for reason, n in sorted(Counter(s.reason for s in plan.skipped).items()):
            table.add_row(f"skipped: {reason}", str(n))
        if plan.bad_lines:
            table.add_row("unreadable lines / files", str(len(plan.bad_lines)))
        acknowledged = published.acknowledged if published is not None else 0
        undelivered = published.undelivered if published is not None else []
        if not dry_run:
            table.add_row("events acknowledged", str(acknowledged))
            table.add_row("trials not delivered", str(len(undelivered)))
        if as_json:
            typer.echo(json.dumps({
                "dry_run": dry_run, "spans": plan.spans, "taken": len(plan.taken),
                "with_session": with_state,
                "probed": plan.probed if open_probe is not None else None,
                "not_probed": len(plan.not_probed) if open_probe is not None else None,
                "skipped": dict(sorted(Counter(s.reason for s in plan.skipped).items())),
                "bad_lines": len(plan.bad_lines),
                "dead_letters": 0 if dry_run else len(plan.letters),
                "acknowledged": None if dry_run else acknowledged,
                "undelivered": None if dry_run else undelivered,
                "interrupted": published is not None and published.interrupted}))
        else:
            out.print(table)
        for s in plan.skipped[:SHOWN]:
            err.print(f"skipped trace {s.trace_id}: {s.reason}: {s.detail}", markup=False,
                      soft_wrap=True, highlight=False)
        for where, why in plan.bad_lines[:SHOWN]:
            err.print(f"unreadable {where}: {why}", markup=False, soft_wrap=True,
                      highlight=False)
        for trial, why in plan.not_probed[:SHOWN]:
            err.print(f"no persisted session for {trial}: {why}", markup=False,
                      soft_wrap=True, highlight=False)
        for trial in undelivered[:SHOWN]:
            why = published.reasons[trial] if published is not None else ""
            err.print(f"not delivered: {trial}: {why}", markup=False, soft_wrap=True,
                      highlight=False)
        again = ("import the same files again to send the rest: event ids come from the "
                 "traces, and the pipeline drops the repeats")
        if published is not None and published.interrupted:
            gone = (f"; {len(undelivered)} trial(s) not delivered, the first {undelivered[0]}"
                    if undelivered else "")
            err.print(f"stopped: {acknowledged} event(s) delivered{gone}; {again}",
                      markup=False, soft_wrap=True, highlight=False)
            raise typer.Exit(130)
        if undelivered:
            err.print(f"error: {len(undelivered)} trial(s) not delivered, the first "
                      f"{undelivered[0]}; {again}", markup=False, soft_wrap=True,
                      highlight=False)
            raise typer.Exit(4)
        if not plan.taken:
            err.print("error: no complete agent trace with passk ids or a matching "
                      "scenario: nothing to send",
                      markup=False)
            raise typer.Exit(3)

    app.add_typer(importer, name="import")


def _rules(settings: Settings, dry_run: bool, err: Console) -> list[Scenario] | None:
    """The published scenarios, whose match rules take traces with no passk ids. A dry
    run without a readable catalog maps without them (and says so)."""
    from services.kafka.catalog import CatalogUnavailable, load_catalog

    try:
        return list(load_catalog(settings).values())
    except (CatalogUnavailable, OSError, KafkaError) as exc:
        if not dry_run:
            raise Unreachable(f"cannot read the published scenarios: {exc}") from None
        err.print(f"warning: no scenario catalog ({exc}); traces without passk ids are "
                  "mapped without match rules", markup=False)
        return None
