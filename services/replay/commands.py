"""`passk replay FILE` and `passk generate ...`: options, then `replay.send_file` or
`files.generate_traffic`, then `render`."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

import typer

from services.clikit import BROKER_WAIT, console

# Imports inside functions here are deferred: every command module loads on each `passk` run.


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
    from services.contract.settings import get_settings
    from services.replay.render import line_progress, print_replay
    from services.replay.replay import send_file

    err = console(stderr=True)
    track = line_progress(err, "validating" if dry_run else "replaying")
    summary, total = send_file(
        file, get_settings(), dry_run=dry_run, rate=rate, wait=wait, track=track
    )
    print_replay(summary, file, total, console(), err)
    raise typer.Exit(summary.exit_code)


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
        None,
        "--start",
        help="occurred_at of the first event, ISO 8601 (default: the run ends now)",
    ),
    advisory: list[str] = typer.Option(
        [],
        "--advisory",
        help="JUDGE=SHARE: an advisory judge the stand-in fails on this "
        "share of its trials; expected outcomes are unchanged (it cannot fail a trial)",
    ),
) -> None:
    """Synthetic production-like traffic with per-scenario flakiness, and expected verdicts."""
    from services.grading.scenario_loader import InvalidScenarios, load_scenarios
    from services.replay.files import generate_traffic
    from services.replay.generate import DEFAULT_QUIRK_RATES, GenerateConfig, GenerateError
    from services.replay.render import plain, print_generated

    err = console(stderr=True)
    try:
        loaded = load_scenarios(scenarios)
    except InvalidScenarios as exc:
        for error in exc.errors:
            plain(err, str(error), "red")
        plain(err, "no traffic written: fix the scenario files first", "bold red")
        raise typer.Exit(2) from None
    for warning in loaded.warnings:
        plain(err, f"warning: {warning}", "yellow")
    config = GenerateConfig(
        run_id=run_id,
        started_at=_parse_start(start),
        seed=seed if seed is not None else secrets.randbelow(2**31),
        trials=trials,
        pass_prob=_parse_assignments(pass_prob, "--pass-prob"),
        default_pass_prob=default_pass_prob,
        quirk_rates={**DEFAULT_QUIRK_RATES, **_parse_assignments(quirk_rate, "--quirk-rate")},
        every_mode=every_mode,
        agent_version=agent_version,
        advisory_flags=_parse_assignments(advisory, "--advisory"),
    )
    try:
        traffic = generate_traffic(
            loaded.scenarios, config, ends_now=start is None, out=out, expected=expected
        )
    except GenerateError as exc:
        plain(err, f"error: no traffic written: {exc}", "bold red")
        raise typer.Exit(2) from None
    print_generated(traffic, config.seed, out, expected, console())


def register(app: typer.Typer) -> None:
    app.command()(replay)
    app.command()(generate)
