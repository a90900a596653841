"""`passk calibrate` and `passk label`."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from services.clikit import BROKER_WAIT
from services.kafka.kafka_client import kafka_client_kwargs
from services.kafka.reach import require_broker

if TYPE_CHECKING:
    from schemas.scenario import Scenario
    from services.calibration.calibrate import JudgeCalibrationResult
    from services.contract.settings import Settings
    from services.grading.calibration import Bar, Matrix

# Imports inside functions here are deferred: every command module loads on each `passk` run.

EXIT_USAGE, EXIT_UNREACHABLE = 2, 4


def _err(message: str, code: int) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def _figure(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _scenarios(sets_dir: Path, scenarios_dir: Path | None, settings: Settings) -> list[Scenario]:
    from services.grading.scenario_loader import load_scenarios
    from services.kafka.catalog import CatalogUnavailable, load_catalog

    folder = scenarios_dir or (sets_dir.parent / "scenarios")
    if folder.is_dir():
        loaded = load_scenarios(folder)
        if loaded.errors:
            raise _err(f"{folder}: invalid scenarios; run `passk scenarios validate {folder}`",
                       EXIT_USAGE)
        return list(loaded.scenarios)
    if scenarios_dir is not None:
        raise _err(f"{scenarios_dir} is not a directory", EXIT_USAGE)
    try:
        return list(load_catalog(settings).values())
    except CatalogUnavailable as exc:
        raise _err(f"no scenarios beside {sets_dir} and the published ones cannot be read: "
                   f"{exc}", EXIT_UNREACHABLE) from exc


def _transcripts(settings: Settings) -> Any:
    """trial id -> its transcript in the projection (None when not there)."""
    from schemas.events import Message
    from services.storage.store import Store

    def lookup(trial_id: str) -> list[Message] | None:
        store = Store(settings.database_url)
        try:
            found = store.transcript(trial_id)
        finally:
            store.close()
        if found is None:
            return None
        return [Message.model_validate(m) for m in found.messages]

    return lookup


def _publish(settings: Settings, calibrations: list[Any]) -> None:
    from kafka import KafkaProducer

    from services.contract.codec import encode
    from services.contract.topics import Topic, topic_name

    # Idempotent, said so a conflicting setting raises: a judge's calibrations, keyed by
    # judge, stay in the order sent across a retried send (the last one is the current).
    producer = KafkaProducer(**kafka_client_kwargs(settings), acks="all",
                             enable_idempotence=True,
                             request_timeout_ms=15000, max_block_ms=15000)
    try:
        name = topic_name(Topic.JUDGE_CALIBRATIONS, settings)
        futures = [producer.send(name, key=c.judge_id.encode(), value=encode(c))
                   for c in calibrations]
        producer.flush(timeout=30)
        for f in futures:
            f.get(timeout=30)
    finally:
        producer.close(timeout=10)


def _print_results(results: list[JudgeCalibrationResult], dims: dict[str, Matrix],
                   bar: Bar, console: Console) -> None:
    table = Table(title=f"judge calibration (positive = the judge flags a failure; "
                        f"bar: precision >= {bar.precision:g} on >= {bar.min_labelled} labels)")
    for name in ("judge", "version"):
        table.add_column(name, overflow="fold")
    for name in ("TP", "FP", "FN", "TN", "errors", "n", "precision", "recall"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("why", overflow="fold")
    for r in results:
        c = r.calibration
        status = "[green]gating[/green]" if c.gating else "[yellow]advisory[/yellow]"
        table.add_row(escape(c.judge_id), c.judge_version, str(c.tp), str(c.fp), str(c.fn),
                      str(c.tn), str(c.errors), str(c.n), _figure(c.precision),
                      _figure(c.recall), status, escape(c.reason))
    console.print(table)
    if dims:
        per = Table(title="per dimension")
        for name in ("dimension", "TP", "FP", "FN", "TN", "errors", "n", "precision", "recall"):
            per.add_column(name)
        for dim, m in sorted(dims.items()):
            per.add_row(escape(dim), str(m.tp), str(m.fp), str(m.fn), str(m.tn), str(m.errors),
                        str(m.n), _figure(m.precision), _figure(m.recall))
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


def _history(judge_id: str, settings: Settings, as_json: bool) -> None:
    from sqlalchemy.exc import OperationalError

    from services.calibration.store import CalibrationStore

    store = CalibrationStore(settings.database_url)
    try:
        rows = store.history(judge_id)
    except OperationalError as exc:
        raise _err(f"cannot read the store at {store.url}: {exc.orig or exc}",
                   EXIT_UNREACHABLE) from exc
    finally:
        store.close()
    if not rows:
        raise _err(f"no calibration of judge {judge_id!r} in the store", 3)
    if as_json:
        typer.echo(json.dumps({"judge_id": judge_id, "history": [
            r.model_dump(mode="json") for r in rows]}))
        return
    table = Table(title=f"calibration history of {judge_id} (oldest first)")
    for name in ("at", "version", "source", "n", "precision", "recall", "status", "why"):
        table.add_column(name)
    for r in rows:
        table.add_row(r.occurred_at.isoformat(timespec="seconds"), r.judge_version, r.source,
                      str(r.n), _figure(r.precision), _figure(r.recall),
                      "gating" if r.gating else "advisory", escape(r.reason))
    Console().print(table)


def _export(folder: Path, settings: Settings) -> None:
    from services.calibration.export import export_sets
    from services.calibration.store import CalibrationStore

    store = CalibrationStore(settings.database_url)
    try:
        written = export_sets(store.items(), folder, _transcripts(settings))
    finally:
        store.close()
    for path, added in written.items():
        Console(stderr=True).print(f"{path}: {added} item(s) added")


def register(app: typer.Typer, *,
             judge_grader: Callable[[Settings], tuple[Any, str]]) -> None:
    """`judge_grader(settings)`: the production judge path and its prompt hash (the judge
    processor's, handed over by the CLI: services/cli/wiring.py)."""
    @app.command()
    def calibrate(
        directory: Path = typer.Argument(None, help="labelled sets: <judge_id>.jsonl files"),
        judge: str = typer.Option(None, "--judge", help="only this judge's set"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        scenarios: Path = typer.Option(
            None, help="where the judges are defined (default: DIR/../scenarios, else the "
                       "published scenarios)"),
        history: str = typer.Option(None, "--history", help="show JUDGE_ID's calibrations "
                                    "over time instead"),
        export: Path = typer.Option(None, "--export", help="write the sets grown by "
                                    "production labels into this directory instead"),
        publish: bool = typer.Option(True, help="publish to judge-calibrations.v1 and store"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Run each judge over its labelled set through the production judge path: confusion
        matrix, precision, recall, and whether it may fail trials (gating) or is advisory."""
        from sqlalchemy.exc import OperationalError

        from services.calibration.calibrate import by_dimension, calibrate_json, plan_judges, run
        from services.calibration.sets import load_sets
        from services.calibration.store import CalibrationStore
        from services.contract.settings import get_settings
        from services.grading.calibration import Bar

        settings = get_settings()
        if history:
            return _history(history, settings, as_json)
        if export:
            return _export(export, settings)
        if directory is None:
            raise _err("give a directory of labelled sets (or --history ID, --export DIR)",
                       EXIT_USAGE)
        sets, problems = load_sets(directory, judge)
        if problems and not sets:
            for p in problems:
                Console(stderr=True).print(f"[red]{escape(p.file)}:{p.line or ''}[/red] "
                                           f"{escape(p.problem)}", soft_wrap=True)
            raise typer.Exit(EXIT_USAGE)
        if publish:  # before any judge is asked: the results would have nowhere to go
            require_broker(wait, settings)
        bar = Bar(settings.calibration_bar, settings.min_labelled)
        plan = plan_judges(_scenarios(directory, scenarios, settings))
        from services.contract.runfiles import NoJudge, cli_judge

        try:  # with no OPENAI_* here: the endpoint `make up` gave the workers
            judge_settings, note = cli_judge(settings)
        except NoJudge as exc:
            raise _err(str(exc), EXIT_UNREACHABLE if exc.unreachable else EXIT_USAGE) from None
        if note:
            Console(stderr=True).print(note, soft_wrap=True, markup=False)
        grader, prompt_hash = judge_grader(judge_settings)
        results, more = asyncio.run(run(sets, plan, grader, bar=bar, prompt_hash=prompt_hash,
                                        transcript_of=_transcripts(settings)))
        problems += more
        for p in problems:
            Console(stderr=True).print(f"[yellow]{escape(p.file)}:{p.line or ''}[/yellow] "
                                       f"{escape(p.problem)}", soft_wrap=True)
        if publish and results:
            calibrations = [r.calibration for r in results]
            try:
                _publish(settings, calibrations)
            except Exception as exc:  # noqa: BLE001 - any broker failure: a clear error
                raise _err(f"cannot publish to the broker at "
                           f"{settings.kafka_bootstrap_servers}: {exc}", EXIT_UNREACHABLE) from exc
            store = CalibrationStore(settings.database_url)
            try:
                for c in calibrations:
                    store.record_calibration(c)
            except OperationalError as exc:
                raise _err(f"cannot write the store at {store.url}: {exc.orig or exc}",
                           EXIT_UNREACHABLE) from exc
            finally:
                store.close()
        if as_json:
            typer.echo(json.dumps(calibrate_json(results)))
        else:
            _print_results(results, by_dimension(results, bar), bar,
                           Console(width=None if sys.stdout.isatty() else 200))
        if problems:
            raise typer.Exit(EXIT_USAGE)

    @app.command()
    def label(
        trial_id: str = typer.Argument(..., help="the graded trial"),
        judge: str = typer.Option(..., "--judge", help="the judge whose verdict is labelled"),
        passed: bool = typer.Option(None, "--pass/--fail",
                                    help="does the judge's assertion hold for this trial?"),
        note: str = typer.Option(None, "--note", help="why, in a few words"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Label one judge's verdict on one trial (a production miss goes back into its set)."""
        import getpass

        from services.contract.settings import get_settings
        from services.kafka.labels import label_event, publish_labels

        if passed is None:
            raise _err("say --pass or --fail", EXIT_USAGE)
        settings = get_settings()
        require_broker(wait, settings)
        event = label_event(trial_id, judge, passed, note, getpass.getuser())
        try:
            publish_labels(settings, [event])
        except Exception as exc:  # noqa: BLE001 - any broker failure: a clear error
            raise _err(f"cannot publish the label to {settings.kafka_bootstrap_servers}: {exc}",
                       EXIT_UNREACHABLE) from exc
        Console(stderr=True).print(
            f"labelled {escape(trial_id)} for {escape(judge)}: "
            f"{'pass' if passed else 'fail'}", soft_wrap=True)

