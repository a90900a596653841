"""`passk topics ...`."""

from __future__ import annotations

import typer
from rich.table import Table

from services.common.exits import console, require_broker


def register(app: typer.Typer) -> None:
    topics = typer.Typer(help="Kafka topics passk uses.", no_args_is_help=True)

    @topics.command("create")
    def create() -> None:
        """Create every passk topic that does not exist yet (idempotent)."""
        from services.common.admin import create_topics

        require_broker()
        table = Table("topic", "partitions", "status")
        for status in create_topics():
            state = "created" if status.created else "exists"
            table.add_row(status.name, str(status.partitions), state)
        console().print(table)

    app.add_typer(topics, name="topics")

    @app.command()
    def status(
        wait: float = typer.Option(
            0, help="wait up to this many seconds for the broker and for every processor"
        ),
        processors: str = typer.Option(
            "gate,verdict,judge,sink,aggregate,calibration",
            help="comma-separated processors to show"
        ),
    ) -> None:
        """Show each processor's consumer group (state, members, lag) and which broker
        leads each partition of its inputs. Exit 1 when any is not ready, 4 when the
        broker does not answer within --wait (at least 1 s)."""
        import time

        from services.common.status import input_leaders, processor_status

        names = [p.strip() for p in processors.split(",") if p.strip()]
        deadline = time.monotonic() + wait
        require_broker(max(wait, 1.0))
        while True:
            statuses = processor_status(names)
            if all(s.ready for s in statuses) or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
        table = Table("processor", "consumer group", "state", "members", "lag", "member ids")
        for s in statuses:
            table.add_row(s.processor, s.group, s.state, str(s.members),
                          "-" if s.lag is None else str(s.lag), "\n".join(s.member_names))
        out = console()
        out.print(table)
        leaders = Table("input topic", "partition", "leader broker", "in-sync replicas")
        for p in input_leaders(names):
            leaders.add_row(p.topic, str(p.partition), "none" if p.leader is None else
                            str(p.leader), ",".join(map(str, p.in_sync)))
        out.print(leaders)
        if not all(s.ready for s in statuses):
            raise typer.Exit(1)
