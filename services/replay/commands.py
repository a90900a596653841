"""`passk replay FILE` and `passk generate ...`."""

from __future__ import annotations

import secrets
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.clikit import BROKER_WAIT

# Imports inside functions here are deferred: every command module loads on each `passk` run.

SHOWN = 10  # skipped lines / failures listed one by one; the rest are counted


def _plain(console: Console, text: str, style: str | None = None) -> None:
    # Line numbers and reasons stay on one line whatever the terminal width: people grep them.
    console.print(text, style=style, soft_wrap=True, markup=False, highlight=False)


def _parse_assignments(values: list[str], option: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in values:
        name, sep, number = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = float(number)
        except ValueError:
            raise typer.BadParameter(
                f"expected NAME=NUMBER, got {item!r}", param_hint=option
            ) from None
    return out


def _parse_start(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC).replace(microsecond=0)
    try:
        start = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"not an ISO 8601 time: {text!r}", param_hint="--start") from None
    return start if start.tzinfo else start.replace(tzinfo=UTC)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def register(app: typer.Typer) -> None:
    @app.command()
    def replay(
        file: Path = typer.Argument(
            ..., exists=True, dir_okay=False, readable=True, help="JSONL of input events"
        ),
        rate: float = typer.Option(
            None, "--rate", min=0.001, help="at most this many events per second (default: none)"
        ),
        dry_run: bool = typer.Option(False, "--dry-run", help="validate every line, send nothing"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Send a JSONL file of input events to the input topics, in file order.

        Invalid lines (and lines longer than PASSK_MAX_EVENT_BYTES, which are never read
        whole) are reported on stderr with their line number and skipped, never sent.
        Every send is delivered or reported: exit 4 names the first line the broker did
        not take (within PASSK_PRODUCER_DELIVERY_TIMEOUT_S) and how many; replaying the
        file again sends them, and the pipeline drops the repeats of the rest. Exit 3 when
        no line was valid, 4 when the broker is down, 130 when stopped (SIGINT), with the
        summary of what was delivered.
        """
        from services.clikit import console as make_console
        from services.contract.exits import Unreachable
        from services.contract.settings import get_settings
        from services.contract.topics import topic_name
        from services.kafka.producer import TrafficProducer
        from services.kafka.reach import require_broker
        from services.replay.replay import REPLAYED_TOPICS, count_lines, replay_file

        settings = get_settings()
        console = make_console()
        err = make_console(stderr=True)
        if not dry_run:
            require_broker(wait, settings)
        total = count_lines(file)
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=err, transient=False) as progress:
            task = progress.add_task("validating" if dry_run else "replaying", total=total)

            def advance(lineno: int) -> None:
                progress.update(task, completed=lineno)

            if dry_run:
                summary = replay_file(file, sender=None, settings=settings, on_line=advance)
            else:
                # kafka errors escape to services.cli: one line, exit 4
                producer = TrafficProducer(settings)
                try:
                    inputs = [topic_name(t, settings) for t in REPLAYED_TOPICS]
                    missing = producer.missing_topics(inputs)
                    if missing:
                        progress.stop()
                        raise Unreachable(f"missing topics: {', '.join(missing)}; nothing sent "
                                          "(create them with `passk topics create`)")
                    # Bounded: waits for the broker's acknowledgements at most the
                    # producer's deadline, and a SIGINT ends it with the summary below.
                    summary = replay_file(
                        file, sender=producer, settings=settings, rate=rate, on_line=advance
                    )
                finally:
                    producer.close(timeout_s=0)  # replay_file waited already

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
        console.print(table)
        for skipped in summary.skipped[:SHOWN]:
            _plain(err, f"skipped {skipped}", "yellow")
        if len(summary.skipped) > SHOWN:
            _plain(err, f"... and {len(summary.skipped) - SHOWN} more skipped lines", "yellow")
        for undelivered in summary.undelivered[:SHOWN]:
            _plain(err, f"not delivered: {undelivered}", "red")
        if len(summary.undelivered) > SHOWN:
            _plain(err, f"... and {len(summary.undelivered) - SHOWN} more not delivered", "red")
        again = (f"replay {file} again to send the rest: events keep their ids, and the "
                 "pipeline drops the repeats of lines already delivered")
        first = summary.undelivered[0] if summary.undelivered else None
        if summary.exit_code == 130:
            gone = (f"; {len(summary.undelivered)} not delivered, the first {first.ref}"
                    if first else "")
            _plain(err, f"stopped after line {summary.last_line} of {total}: "
                        f"{summary.delivered} line(s) delivered{gone}; {again}", "yellow")
        elif summary.exit_code == 4 and first is not None:
            _plain(err, f"error: {len(summary.undelivered)} valid line(s) not delivered, the "
                        f"first {first.ref} ({first.why}); {again}", "bold red")
        elif summary.exit_code == 3:
            _plain(err, f"error: no valid line in {file}: nothing was sent", "bold red")
        elif summary.skipped:
            rest = "the other lines are valid" if dry_run else "every valid line was sent"
            warning = f"warning: {len(summary.skipped)} invalid line(s) skipped; {rest}"
            _plain(err, warning, "yellow")
        raise typer.Exit(summary.exit_code)

    @app.command()
    def generate(
        scenarios: Path = typer.Option(..., "--scenarios", exists=True, help="scenario YAML dir"),
        run_id: str = typer.Option(..., "--run-id", help="run id written into every event"),
        out: Path = typer.Option(..., "--out", help="traffic JSONL to write"),
        expected: Path = typer.Option(..., "--expected", help="expected outcomes JSON to write"),
        trials: int = typer.Option(0, "--trials", min=0, help="trials per scenario (at least k)"),
        pass_prob: list[str] = typer.Option(
            [], "--pass-prob", help="SCENARIO=P: true pass probability of one scenario"
        ),
        default_pass_prob: float = typer.Option(0.8, "--default-pass-prob", min=0.0, max=1.0),
        seed: int = typer.Option(None, "--seed", help="same seed and --start: same bytes"),
        agent_version: str = typer.Option(None, "--agent-version"),
        every_mode: bool = typer.Option(
            False, "--every-mode", help="every failure mode and quirk at least once"
        ),
        quirk_rate: list[str] = typer.Option(
            [], "--quirk-rate", help="QUIRK=R, e.g. session_late=0.2 (defaults: 0.1, missing 0.05)"
        ),
        start: str = typer.Option(
            None, "--start",
            help="occurred_at of the first event, ISO 8601 (default: the run ends now)",
        ),
        advisory: list[str] = typer.Option(
            [], "--advisory", help="JUDGE=SHARE: an advisory judge the stand-in fails on this "
            "share of its trials; expected outcomes are unchanged (it cannot fail a trial)"
        ),
    ) -> None:
        """Synthetic production-like traffic with per-scenario flakiness, and expected verdicts."""
        from services.clikit import console as make_console
        from services.grading.scenario_loader import InvalidScenarios, load_scenarios
        from services.replay.generate import (
            DEFAULT_QUIRK_RATES,
            GenerateConfig,
            GenerateError,
            generate_ending_by,
        )
        from services.replay.generate import generate as build

        console = make_console()
        err = make_console(stderr=True)
        try:
            loaded = load_scenarios(scenarios)
        except InvalidScenarios as exc:
            for error in exc.errors:
                _plain(err, str(error), "red")
            _plain(err, "no traffic written: fix the scenario files first", "bold red")
            raise typer.Exit(2) from None
        for warning in loaded.warnings:
            _plain(err, f"warning: {warning}", "yellow")
        rates = {**DEFAULT_QUIRK_RATES, **_parse_assignments(quirk_rate, "--quirk-rate")}
        used_seed = seed if seed is not None else secrets.randbelow(2**31)
        config = GenerateConfig(
            run_id=run_id,
            started_at=_parse_start(start),
            seed=used_seed,
            trials=trials,
            pass_prob=_parse_assignments(pass_prob, "--pass-prob"),
            default_pass_prob=default_pass_prob,
            quirk_rates=rates,
            every_mode=every_mode,
            agent_version=agent_version,
            advisory_flags=_parse_assignments(advisory, "--advisory"),
        )
        try:
            # Without --start the run ends now, so replaying it sends no event dated ahead
            # of the clock; with --start the times are the caller's, as given.
            traffic = (build(loaded.scenarios, config) if start is not None else
                       generate_ending_by(loaded.scenarios, config, datetime.now(UTC)))
        except GenerateError as exc:
            _plain(err, f"error: no traffic written: {exc}", "bold red")
            raise typer.Exit(2) from None
        _write(out, traffic.jsonl())
        _write(expected, traffic.expected_json())

        table = Table(title=f"generated run {run_id} (seed {used_seed}; passes = expected)")
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
        _plain(console, f"{len(traffic.events)} events → {out}; expected outcomes → {expected}")
