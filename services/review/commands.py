"""`passk review`: the review app (docs/review.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from services.clikit import BROKER_WAIT
from services.contract.exits import Unreachable, UsageError

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def register(app: typer.Typer, *, trial_view: Callable[[Any], Callable[[str], Any]]) -> None:
    """`trial_view(settings)`: trial id -> the view `passk show` builds (the report
    processor's, handed over by the CLI: services/cli/wiring.py)."""

    @app.command()
    def review(
        host: str = typer.Option(
            None, "--host", help="address to bind (default PASSK_REVIEW_HOST, 127.0.0.1)"
        ),
        port: int = typer.Option(None, "--port", help="port (default PASSK_REVIEW_PORT, 8700)"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Serve the review queue: reviewers sign in (PASSK_REVIEW_TOKENS), read trials the
        queues pick, and label what the LLM judges decided; labels go to labels.v1 as
        `passk label` sends them."""
        import asyncio

        from aiokafka.errors import KafkaError

        from services.contract.settings import get_settings
        from services.kafka.reach import require_broker
        from services.review.app import serve
        from services.review.auth import BadTokens, Reviewers

        settings = get_settings()
        try:  # a malformed PASSK_REVIEW_TOKENS is refused before anything starts
            Reviewers(settings.review_tokens.get_secret_value() if settings.review_tokens else None)
        except BadTokens as exc:
            raise UsageError(str(exc)) from None
        chosen_host = host or settings.review_host
        chosen_port = settings.review_port if port is None else port
        # Where it would listen is checked before the broker is asked, and what cannot be
        # listened on (a port out of range, a host that does not resolve or is not this
        # machine's, a port in use) is a usage error said in one line
        # (services/contract/exits.py), not a traceback nor uvicorn's own exit 1 after the
        # followers have started. 0 is allowed: any free port (the tests use it).
        _probe(chosen_host, chosen_port)
        require_broker(wait, settings)
        try:
            asyncio.run(serve(settings, trial_view(settings), host=chosen_host, port=chosen_port))
        except (TimeoutError, KafkaError) as exc:
            raise Unreachable(
                f"passk review: cannot follow the labels and calibrations at "
                f"{settings.kafka_bootstrap_servers}: {exc!r}"
            ) from None
        except KeyboardInterrupt:
            pass


def _probe(host: str, port: int) -> None:
    """Bind (host, port) once and let go: a `UsageError` naming both if that cannot be."""
    import errno
    import socket

    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is outside 0-65535 (0: any free port)")
    try:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except (OSError, OverflowError, UnicodeError) as exc:
        why = str(exc) or type(exc).__name__
        if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
            hint = "the port is already in use; choose another with --port"
        elif isinstance(exc, socket.gaierror):
            hint = "the host does not resolve; give an address of this machine with --host"
        else:
            hint = "give an address of this machine with --host and a free port with --port"
        raise UsageError(f"passk review cannot listen on {host}:{port} ({why}): {hint}") from None
