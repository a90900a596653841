"""`passk topics ...`."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table


def register(app: typer.Typer) -> None:
    topics = typer.Typer(help="Kafka topics passk uses.", no_args_is_help=True)

    @topics.command("create")
    def create() -> None:
        """Create every passk topic that does not exist yet (idempotent)."""
        from services.common.admin import create_topics

        table = Table("topic", "partitions", "status")
        for status in create_topics():
            state = "created" if status.created else "exists"
            table.add_row(status.name, str(status.partitions), state)
        Console().print(table)

    app.add_typer(topics, name="topics")
