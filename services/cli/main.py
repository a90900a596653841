"""The `passk` command line. Each processor contributes its commands through the
`register` of its `commands` module, all called in one place: `register_commands`."""

from __future__ import annotations

import importlib
import sys
import time
from importlib.metadata import version
from typing import Any

import typer

# typer vendors click; its ClickException is what typer's main loop reports and exits on.
from typer._click.exceptions import ClickException
from typer.core import TyperGroup

from services.aggregate import commands as aggregate_commands
from services.audit import commands as audit_commands
from services.calibration import commands as calibration_commands
from services.ci import commands as ci_commands
from services.cli import commands as cli_commands
from services.cli import wiring
from services.cli.wiring import WIRED_APPS
from services.contract.exits import EXIT_CODES_HELP, CliError, ExitCode, classify, say_error
from services.contract.processors import PROCESSORS, co_partitioning_problem
from services.contract.settings import Settings, get_settings
from services.contract.topics import topic_name
from services.harness import commands as harness_commands
from services.judge import commands as judge_commands
from services.kafka.admin import create_topics_retrying, partition_counts
from services.kafka.kafka_client import (
    EXIT_KAFKA_REFUSED,
    refusal_message,
    watch_authentication,
)
from services.otlp import commands as otlp_commands
from services.regrade import commands as regrade_commands
from services.replay import commands as replay_commands
from services.report import commands as report_commands
from services.review import commands as review_commands
from services.scenarios import commands as scenarios_commands
from services.sink import commands as sink_commands


class _ClickError(ClickException):
    """A command's `CliError` as click's: typer's own main loop (and its CliRunner in
    tests) prints it with `show` and exits with `exit_code`."""

    def __init__(self, error: CliError):
        super().__init__(error.message)
        self.exit_code = int(error.code)

    def show(self, file: Any = None) -> None:
        say_error(self.message)


class PasskGroup(TyperGroup):
    """The `passk` group: a command's `CliError` (a plain exception, from below the CLI)
    becomes click's, so every command ends with its message and exit code."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as exc:
            raise _ClickError(exc) from exc


app = typer.Typer(
    cls=PasskGroup,
    name="passk",
    help="passk: grade agent trials with binary judges and outcome gates; pass@k and pass^k.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help text: rich markup would swallow `[[fail:<judge_id>]]` and the like.
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"passk {version('passk')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    pass


def register_commands(app: typer.Typer) -> None:
    """Every `passk` command, in the order `passk --help` lists them. The commands that
    compose two processors are handed what they need of the other (services/cli/wiring.py).
    Each module imports its heavy dependencies inside its command bodies: start-up stays
    fast although every module loads on each run."""
    cli_commands.register(app)
    replay_commands.register(app)
    scenarios_commands.register(app)
    judge_commands.register(app)
    report_commands.register_wait(app)
    report_commands.register(app)
    sink_commands.register(app)
    report_commands.register_windows(app)
    report_commands.register_dead_letters(app)
    regrade_commands.register(app)
    calibration_commands.register(app, judge_grader=wiring.judge_grader)
    harness_commands.register(app, publish=wiring.publish)
    otlp_commands.register(app, state_probe=wiring.state_probe)
    aggregate_commands.register(app, paused=wiring.worker_paused)
    audit_commands.register(
        app,
        read_table=wiring.aggregate_table,
        regrade=wiring.regrade_trials,
        recount=wiring.recount_scenarios,
    )
    review_commands.register(app, trial_view=wiring.trial_view)
    ci_commands.register(app)


@app.command()
def worker(
    service: str = typer.Argument(..., help=f"one of: {', '.join(PROCESSORS)}"),
    loglevel: str = typer.Option(None, "--loglevel", "-l", help="crit|error|warn|info|debug"),
) -> None:
    """Run one stream processor (a Faust worker in its own consumer group)."""
    if service not in PROCESSORS:
        raise typer.BadParameter(
            f"unknown service {service!r}; choose from {', '.join(PROCESSORS)}"
        )
    # Where the worker's settings are read, once; everything it builds is handed these.
    settings = get_settings()
    # Idempotent; the worker's inputs, outputs and table changelogs must exist before
    # Faust subscribes, or a fresh broker's metadata can lag behind the first event.
    statuses = create_topics_retrying(settings)
    refuse_unless_co_partitioned(service, settings)
    if statuses and not settings.topic_replication:
        # Faust creates its own leader topic: replicate it like ours on this cluster.
        settings = settings.model_copy(update={"topic_replication": statuses[0].replication})
    # prometheus_client comes with it: only a worker needs it, not every command's start-up.
    from services.runtime.outage import health, health_path

    # Counted per start, so `passk status` shows how often a supervisor restarted it.
    health().path = health_path(settings.data_dir, service)
    health().started(service)
    module = importlib.import_module(PROCESSORS[service].module)
    level = loglevel or settings.log_level
    sys.argv = [f"passk worker {service}", "worker", "--loglevel", level, "--without-web"]
    # The root logger stays at `level`: make_app installed faust_compat.worker_log.
    module.build(settings, **WIRED_APPS.get(PROCESSORS[service].module, {})).main()


def refuse_unless_co_partitioned(service: str, settings: Settings) -> None:
    """A join by key is only right when every joined topic has the same partition count."""
    topics = PROCESSORS[service].co_partitioned
    if not topics:
        return
    names = [topic_name(t, settings) for t in topics]
    deadline = time.monotonic() + 60
    counts = partition_counts(names, settings)
    # Topics created a moment ago may not be in every broker's metadata yet.
    while len(counts) < len(names) and time.monotonic() < deadline:
        time.sleep(1.0)
        counts = partition_counts(names, settings)
    problem = co_partitioning_problem(
        service, {t: counts.get(topic_name(t, settings)) for t in topics}
    )
    if problem:
        typer.echo(f"passk worker {service}: refusing to start: {problem}", err=True)
        raise typer.Exit(2)


register_commands(app)


def _bootstrap() -> str:
    """The broker address an "unreachable" error names."""
    try:
        return get_settings().kafka_bootstrap_servers
    except Exception:  # the settings themselves may be what is broken
        return "KAFKA_BOOTSTRAP_SERVERS"


def main() -> None:
    """Run a command; what it lets escape becomes a one-line error and an exit code
    (services/contract/exits.py), never a traceback, unless it is a bug. Kafka refusing our
    credentials or rights is told apart from a broker that is down: exit 5."""
    watch = watch_authentication()
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        refused = refusal_message(exc, watch, get_settings)
        if refused is not None:
            say_error(refused)
            sys.exit(EXIT_KAFKA_REFUSED)
        answer = classify(exc, _bootstrap)
        if answer is None:
            raise
        code, message = answer
        say_error(message)
        sys.exit(int(code))


assert ExitCode.USAGE == 2  # click's own usage errors exit 2: the table agrees with it


if __name__ == "__main__":
    main()
