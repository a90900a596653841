"""`passk judge-standin`: the offline, OpenAI-compatible stand-in judge server (not a model)."""

from __future__ import annotations

import typer

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def register(app: typer.Typer) -> None:
    @app.command("judge-standin")
    def judge_standin(
        host: str = typer.Option("127.0.0.1", help="bind address (local only)"),
        port: int = typer.Option(8400, help="0 picks a free port and prints it"),
        latency_ms: float = typer.Option(
            0.0, envvar="PASSK_STANDIN_LATENCY_MS", help="delay before every answer"
        ),
        fail_rate_429: float = typer.Option(
            0.0, envvar="PASSK_STANDIN_FAIL_RATE_429", help="fraction of requests answered 429"
        ),
        fail_rate_500: float = typer.Option(
            0.0, envvar="PASSK_STANDIN_FAIL_RATE_500", help="fraction of requests answered 500"
        ),
        fail_first: int = typer.Option(
            0, envvar="PASSK_STANDIN_FAIL_FIRST", help="answer the first N requests with 500"
        ),
        retry_after: float = typer.Option(
            1.0, envvar="PASSK_STANDIN_RETRY_AFTER", help="Retry-After seconds sent with 429"
        ),
        no_json_schema: bool = typer.Option(
            False, "--no-json-schema", help="reject response_format (tool calls only)"
        ),
        seed: int = typer.Option(0, help="seed of the random fault rates"),
        user_breaks_role_every: int = typer.Option(
            0,
            "--user-breaks-role-every",
            min=0,
            help="as the simulated user, answer as the assistant in every N-th conversation "
            "(the 1st, the N+1-th, ...); 0: never",
        ),
    ) -> None:
        """Serve a deterministic stand-in judge (NOT a model) on /v1/chat/completions.

        Rule: an assertion passes unless the transcript contains [[fail:<judge_id>]].
        Markers [[standin:429|500|hang|malformed]] in a transcript inject that fault.
        """
        from services.judge.standin import StandinConfig, serve

        if host not in ("127.0.0.1", "localhost", "::1"):
            raise typer.BadParameter(
                "the stand-in binds to the local host only", param_hint="--host"
            )
        for name, rate in (("--fail-rate-429", fail_rate_429), ("--fail-rate-500", fail_rate_500)):
            if not 0.0 <= rate <= 1.0:
                raise typer.BadParameter("must be between 0 and 1", param_hint=name)
        serve(
            StandinConfig(
                latency_ms=latency_ms,
                fail_rate_429=fail_rate_429,
                fail_rate_500=fail_rate_500,
                fail_first=fail_first,
                retry_after_s=retry_after,
                json_schema=not no_json_schema,
                seed=seed,
                user_breaks_role_every=user_breaks_role_every,
            ),
            host=host,
            port=port,
        )
