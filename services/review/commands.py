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
        import socket

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
        require_broker(wait, settings)
        chosen_host = host or settings.review_host
        chosen_port = settings.review_port if port is None else port
        # A port in use is a usage error said in one line (services/contract/exits.py), not
        # uvicorn's own exit 1 after the followers have started.
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((chosen_host, chosen_port))
        try:
            asyncio.run(serve(settings, trial_view(settings), host=chosen_host, port=chosen_port))
        except (TimeoutError, KafkaError) as exc:
            raise Unreachable(
                f"passk review: cannot follow the labels and calibrations at "
                f"{settings.kafka_bootstrap_servers}: {exc!r}"
            ) from None
        except KeyboardInterrupt:
            pass
