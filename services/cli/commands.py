"""`passk topics create`, `passk supervise ...` and `passk status`: options, then one
function of `services.cli` (`supervise`, `status`) or of the kafka adapter, then `render`."""

from __future__ import annotations

from pathlib import Path

import typer

from services.clikit import BROKER_WAIT, console
from services.contract.processors import PROCESSORS, WORKERS
from services.kafka.reach import require_broker

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def create(wait: float | None = BROKER_WAIT) -> None:
    """Create every passk topic that does not exist yet (idempotent)."""
    from services.cli.render import print_topics
    from services.contract.settings import get_settings
    from services.kafka.admin import create_topics

    settings = get_settings()
    require_broker(wait, settings)
    print_topics(create_topics(settings), console())


def supervise_config(
    out: Path = typer.Option(..., help="where to write the supervisord configuration"),
    log_dir: Path = typer.Option(..., help="the workers' and supervisord's logs"),
    metrics_base: int = typer.Option(
        9464,
        help="each worker serves /metrics on base + its offset in the registry "
        "(services.contract.processors)",
    ),
    standin_port: int = typer.Option(0, help="also supervise the judge stand-in on this port"),
    agent_port: int = typer.Option(
        0, help="also supervise the reference product (examples/agent) on this port"
    ),
    review_port: int = typer.Option(
        0, help="also supervise the review app (`passk review`) on this port"
    ),
    only: str = typer.Option("", help="comma-separated workers (default: every worker)"),
    kafka_secrets: Path | None = typer.Option(
        None,
        help="a secured broker's secrets directory (var/kafka/secrets): each "
        "worker connects as its own user, passk-<worker>",
    ),
) -> None:
    """Write supervisord's configuration for every worker in
    services.contract.processors.PROCESSORS (readable by its owner only: with
    --kafka-secrets it holds the workers' passwords)."""
    from services.cli.supervise import write_config

    chosen = [w.strip() for w in only.split(",") if w.strip()]
    if unknown := set(chosen) - set(PROCESSORS):
        raise typer.BadParameter(f"unknown workers: {', '.join(sorted(unknown))}")
    write_config(
        out,
        log_dir,
        chosen=chosen,
        metrics_base=metrics_base,
        standin_port=standin_port,
        agent_port=agent_port,
        review_port=review_port,
        kafka_secrets=kafka_secrets,
    )
    typer.echo(str(out))


def supervise_socket(
    conf: Path = typer.Option(..., help="a configuration `passk supervise config` wrote"),
) -> None:
    """Print the socket of the supervisord a configuration names, if it is still in a
    place only this user can reach; else exit 2 and say why (`make up` and `make down`
    ask this before they talk to it)."""
    from services.cli.liveness import configured_socket

    sock = configured_socket(conf)
    if sock is not None:
        typer.echo(str(sock))


def supervise_workers() -> None:
    """Print the workers, comma-separated (what `passk status` checks after `make up`)."""
    typer.echo(",".join(WORKERS))


def status(
    wait: float | None = BROKER_WAIT,
    processors: str = typer.Option(
        "", help="comma-separated processors to show (default: every worker)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    partitions: bool = typer.Option(
        False,
        "--partitions",
        help="list every input partition's leader (default: only those with no leader "
        "or a replica out of sync, after a one-line count)",
    ),
) -> None:
    """Show each processor's consumer group (state, members, lag), its restarts,
    whether it is degraded (cannot reach the broker or the store) or down (its
    supervisor says it is not running, or its group has no member), stalled (its live
    process has written no heartbeat for 30 s), and which broker leads each partition
    of its inputs. --wait also waits that long for every processor to be healthy.
    Exit 1 when any is not ready, down, stalled or degraded; 4 when the broker does
    not answer within --wait (default PASSK_BROKER_WAIT_S)."""
    from services.cli.render import print_status, status_json
    from services.cli.status import status_report
    from services.contract.settings import get_settings

    names = [p.strip() for p in processors.split(",") if p.strip()] or list(WORKERS)
    report = status_report(names, get_settings(), wait)
    if as_json:
        typer.echo(status_json(report))
    else:
        print_status(report, console(), partitions)
    if not report.healthy:  # not ready, down, stalled or degraded
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    topics = typer.Typer(help="Kafka topics passk uses.", no_args_is_help=True)
    topics.command("create")(create)
    app.add_typer(topics, name="topics")

    supervise = typer.Typer(help="Running the workers under supervisord.", no_args_is_help=True)
    supervise.command("config")(supervise_config)
    supervise.command("socket")(supervise_socket)
    supervise.command("workers")(supervise_workers)
    app.add_typer(supervise, name="supervise")

    app.command()(status)
