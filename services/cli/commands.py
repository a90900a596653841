"""`passk topics ...`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from services.clikit import BROKER_WAIT, console
from services.contract.exits import UsageError
from services.contract.processors import PROCESSORS, WORKERS
from services.kafka.reach import require_broker

if TYPE_CHECKING:
    from services.contract.settings import Settings

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def register(app: typer.Typer) -> None:
    topics = typer.Typer(help="Kafka topics passk uses.", no_args_is_help=True)

    @topics.command("create")
    def create(wait: float | None = BROKER_WAIT) -> None:
        """Create every passk topic that does not exist yet (idempotent)."""
        from services.contract.settings import get_settings
        from services.kafka.admin import create_topics

        settings = get_settings()
        require_broker(wait, settings)
        table = Table("topic", "partitions", "status")
        for status in create_topics(settings):
            state = "created" if status.created else "exists"
            table.add_row(status.name, str(status.partitions), state)
        console().print(table)

    app.add_typer(topics, name="topics")

    supervise = typer.Typer(help="Running the workers under supervisord.", no_args_is_help=True)

    @supervise.command("config")
    def supervise_config(
        out: Path = typer.Option(..., help="where to write the supervisord configuration"),
        log_dir: Path = typer.Option(..., help="the workers' and supervisord's logs"),
        metrics_base: int = typer.Option(
            9464, help="each worker serves /metrics on base + its offset in the registry "
                       "(services.contract.processors)"),
        standin_port: int = typer.Option(0, help="also supervise the judge stand-in on this port"),
        agent_port: int = typer.Option(0, help="also supervise the reference product "
                                                "(examples/agent) on this port"),
        review_port: int = typer.Option(0, help="also supervise the review app "
                                                 "(`passk review`) on this port"),
        only: str = typer.Option("", help="comma-separated workers (default: every worker)"),
        kafka_secrets: Path | None = typer.Option(
            None, help="a secured broker's secrets directory (var/kafka/secrets): each "
                       "worker connects as its own user, passk-<worker>"),
    ) -> None:
        """Write supervisord's configuration for every worker in
        services.contract.processors.PROCESSORS (readable by its owner only: with
        --kafka-secrets it holds the workers' passwords)."""
        supervised = tuple(PROCESSORS)
        from services.cli.supervise import (
            Program,
            passk_executable,
            supervisord_conf,
            worker_programs,
            write_private,
        )
        from services.kafka.kafka_users import UnknownKafkaUser

        passk = passk_executable()
        chosen = [w.strip() for w in only.split(",") if w.strip()]
        if unknown := set(chosen) - set(supervised):
            raise typer.BadParameter(f"unknown workers: {', '.join(sorted(unknown))}")
        if kafka_secrets is not None and not (kafka_secrets / "users.json").is_file():
            raise UsageError(f"--kafka-secrets {kafka_secrets}: no users.json there (made "
                             "by a kafka-up with PASSK_KAFKA_SECURITY=sasl_ssl)")
        try:  # each port is the registry's, whichever workers are chosen
            programs = [p for p in worker_programs(supervised, passk, metrics_base,
                                                   kafka_secrets.resolve() if kafka_secrets
                                                   else None)
                        if not chosen or p.name in chosen]
        except UnknownKafkaUser as exc:
            raise UsageError(str(exc)) from None
        if standin_port:
            programs.insert(0, Program("judge-standin", f"{passk} judge-standin --host "
                                       f"127.0.0.1 --port {standin_port}", {}))
        if review_port:
            # Its reviewers (PASSK_REVIEW_TOKENS) come from the environment supervisord
            # passes on, never from this file.
            programs.append(Program("review", f"{passk} review --port {review_port}",
                                    {"PYTHONUNBUFFERED": "1"}))
        if agent_port:
            import sys

            # The fault plan comes from PASSK_AGENT_FAULTS, which supervisord passes on.
            db = (out.parent.parent / "agent" / "agent.db").resolve()
            programs.insert(0, Program("example-agent", f"{sys.executable} -m "
                                       f"examples.agent.server --host 127.0.0.1 --port "
                                       f"{agent_port} --db {db}", {"PYTHONUNBUFFERED": "1"}))
        out.parent.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        write_private(out, supervisord_conf(programs, run_dir=out.parent.resolve(),
                                            log_dir=log_dir.resolve(), cwd=Path.cwd()))
        typer.echo(str(out))

    @supervise.command("socket")
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

    @supervise.command("workers")
    def supervise_workers() -> None:
        """Print the workers, comma-separated (what `passk status` checks after `make up`)."""
        typer.echo(",".join(WORKERS))

    app.add_typer(supervise, name="supervise")

    @app.command()
    def status(
        wait: float | None = BROKER_WAIT,
        processors: str = typer.Option(
            "", help="comma-separated processors to show (default: every worker)"
        ),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        partitions: bool = typer.Option(
            False, "--partitions",
            help="list every input partition's leader (default: only those with no leader "
                 "or a replica out of sync, after a one-line count)"),
    ) -> None:
        """Show each processor's consumer group (state, members, lag), its restarts,
        whether it is degraded (cannot reach the broker or the store) or down (its
        supervisor says it is not running, or its group has no member), stalled (its live
        process has written no heartbeat for 30 s), and which broker leads each partition
        of its inputs. --wait also waits that long for every processor to be healthy.
        Exit 1 when any is not ready, down, stalled or degraded; 4 when the broker does
        not answer within --wait (default PASSK_BROKER_WAIT_S)."""
        import time

        from services.cli.status import input_leaders, processor_status
        from services.contract.settings import get_settings

        names = [p.strip() for p in processors.split(",") if p.strip()] or list(WORKERS)
        deadline = time.monotonic() + (wait or 0)
        settings = get_settings()
        require_broker(wait, settings)
        while True:
            statuses = processor_status(names, settings)
            if all(s.healthy for s in statuses) or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
        letters = _dead_letter_counts(settings)
        if as_json:
            typer.echo(json.dumps({
                "dead_letters": letters,
                "processors": [{
                    "processor": s.processor, "group": s.group, "state": s.state,
                    "members": s.members, "lag": s.lag, "restarts": s.restarts,
                    "health": s.health, "healthy": s.healthy, "degraded": list(s.degraded),
                    "down": s.down, "stalled": s.stalled, "member_ids": list(s.member_names),
                } for s in statuses],
                "input_leaders": [{
                    "topic": p.topic, "partition": p.partition, "leader": p.leader,
                    "in_sync": list(p.in_sync)} for p in input_leaders(names, settings)],
            }))
            if not all(s.healthy for s in statuses):
                raise typer.Exit(1)
            return
        table = Table("processor", "consumer group", "state", "members", "lag", "restarts",
                      "health", "member ids")
        for s in statuses:
            table.add_row(s.processor, s.group, s.state, str(s.members),
                          "-" if s.lag is None else str(s.lag),
                          "-" if s.restarts is None else str(s.restarts), s.health,
                          "\n".join(s.member_names))
        out = console()
        out.print(table)
        every = input_leaders(names, settings)
        widest = max((len(p.in_sync) for p in every), default=0)
        # A partition is worth a row when it has no leader or fewer replicas in sync than
        # the best of them; the rest is one line (a hundred rows said nothing on one broker).
        shown = every if partitions else [p for p in every
                                          if p.leader is None or len(p.in_sync) < widest]
        out.print(f"input partitions: {len(every)} across {len({p.topic for p in every})} "
                  f"topics, {len(every) - len([p for p in every if p.leader is None])} led, "
                  f"{len([p for p in every if len(p.in_sync) < widest])} with a replica out "
                  "of sync" + ("" if partitions else " (--partitions lists them all)"),
                  markup=False, soft_wrap=True)
        if shown:
            leaders = Table("input topic", "partition", "leader broker", "in-sync replicas")
            for p in shown:
                leaders.add_row(p.topic, str(p.partition), "none" if p.leader is None else
                                str(p.leader), ",".join(map(str, p.in_sync)))
            out.print(leaders)
        if letters is None:
            out.print("dead letters: unknown (the dead-letters topic could not be read)")
        else:
            out.print("dead letters by reason: " + (", ".join(
                f"{r} {n}" for r, n in letters.items()) or "none")
                + " (`passk dead-letters` lists them)", markup=False, highlight=False)
        if not all(s.healthy for s in statuses):  # not ready, down, stalled or degraded
            raise typer.Exit(1)


def _dead_letter_counts(settings: Settings) -> dict[str, int] | None:
    """Dead letters per reason since the topic began (refused inputs and traces not taken);
    None when the topic cannot be read within a few seconds."""
    from kafka.errors import KafkaError

    from services.contract.exits import CliError
    from services.report.dead_letters import read_topic, select

    try:
        listing = select(read_topic(settings, timeout=10.0), since=None, reason=None, limit=1)
    except (CliError, KafkaError, OSError):
        return None
    return dict(sorted(listing.counts.items()))
