"""The `passk` command line. Each service contributes its commands through `register`."""

from __future__ import annotations

import importlib
import sys
import time
from importlib.metadata import version

import typer

from services.cli.wiring import WIRED, WIRED_APPS
from services.contract.exits import EXIT_CODES_HELP, ExitCode, classify, say_error
from services.contract.processors import PROCESSORS, co_partitioning_problem
from services.contract.settings import Settings, get_settings
from services.contract.topics import topic_name
from services.kafka.admin import create_topics_retrying, partition_counts
from services.kafka.kafka_client import (
    EXIT_KAFKA_REFUSED,
    refusal_message,
    watch_authentication,
)

app = typer.Typer(
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

# Modules that add commands: each defines `register(app: typer.Typer) -> None`; the two
# that compose two processors take what they need of the other as keywords (wiring).
COMMAND_MODULES = (
    "services.cli.commands",
    "services.replay.commands",
    "services.scenarios.commands",
    "services.judge.commands",
    "services.report.wait",
    "services.report.commands",
    "services.sink.commands",
    "services.report.windows",
    "services.report.dead_letters",
    "services.regrade.commands",
    "services.calibration.commands",
    "services.harness.commands",
    "services.otlp.commands",
    "services.aggregate.commands",
    "services.audit.commands",
    "services.review.commands",
    "services.ci.commands",
)


@app.command()
def worker(
    service: str = typer.Argument(..., help=f"one of: {', '.join(PROCESSORS)}"),
    loglevel: str = typer.Option(None, "--loglevel", "-l", help="crit|error|warn|info|debug"),
) -> None:
    """Run one stream processor (a Faust worker in its own consumer group)."""
    if service not in PROCESSORS:
        raise typer.BadParameter(
            f"unknown service {service!r}; choose from {', '.join(PROCESSORS)}")
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
        service, {t: counts.get(topic_name(t, settings)) for t in topics})
    if problem:
        typer.echo(f"passk worker {service}: refusing to start: {problem}", err=True)
        raise typer.Exit(2)


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app, **WIRED.get(_name, {}))


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
        answer = classify(exc)
        if answer is None:
            raise
        code, message = answer
        say_error(message)
        sys.exit(int(code))


assert ExitCode.USAGE == 2  # click's own usage errors exit 2: the table agrees with it


if __name__ == "__main__":
    main()
