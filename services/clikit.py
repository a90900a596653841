"""What every `passk` command module shares of the CLI framework (typer, rich): the one
`--wait` option and the console. Below the processors, so each processor's `commands`
module (its CLI adapter, as `app` is its Faust adapter) can use it; only `services.cli`, the
processors' `commands` and `render` modules, and this one import typer or rich
(`pyproject.toml`, contract `cli-framework`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

# The one `--wait` of every command that talks to the broker (pass it to
# services.kafka.reach.require_broker).
BROKER_WAIT: Any = typer.Option(
    None,
    "--wait",
    min=0,
    help="wait at most this many seconds for the Kafka broker before exit 4 "
    "(default PASSK_BROKER_WAIT_S)",
)


def console(stderr: bool = False) -> Console:
    """A rich Console for command output. Not a terminal (a pipe, a file, CI): wide, so
    tables and messages are not cut at rich's default of 80 columns."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(file=stream, width=None if stream.isatty() else 1000, soft_wrap=False)
