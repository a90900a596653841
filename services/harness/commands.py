"""`passk run`: drive an agent through every scenario k times and publish the trials.
Options, then `drive` (the scenarios and target made ready, the trials played), then
`render`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from services.clikit import BROKER_WAIT, console

if TYPE_CHECKING:
    from rich.console import Console

    from services.contract.settings import Settings
    from services.harness.adaptive_run import AdaptiveOptions, AdaptiveResult
    from services.harness.drive import Prepared

# Imports inside functions here are deferred: every command module loads on each `passk` run.


Publisher = Callable[[Sequence[Any], Any], list[tuple[str, str]]]
"""`publish(scenarios, settings)`: `passk scenarios publish`'s; (id, status) pairs."""

SCENARIOS = typer.Option(..., "--scenarios", exists=True, help="scenario YAML files or a directory")
TARGET = typer.Option(..., "--target", help="the target file (agent and state)")
RUN_ID = typer.Option(..., "--run-id", help="the run; trial ids derive from it")
TRIALS = typer.Option(0, "--trials", min=0, help="trials per scenario (at least k)")
CONCURRENCY = typer.Option(
    4, "--concurrency", min=1, max=256, help="trials talking to the agent at once"
)
AGENT_VERSION = typer.Option(None, "--agent-version")
USER_MODEL = typer.Option(
    None,
    "--user-model",
    envvar="PASSK_USER_MODEL",
    help="model playing users without a script (default: the judge model, or the "
    "offline stand-in when no model is configured)",
)
PUBLISH_FIRST = typer.Option(
    False,
    "--publish",
    help="publish the scenarios first (new or changed ones); "
    "without it, an unpublished or changed scenario is exit 2",
)
AS_JSON = typer.Option(False, "--json", help="print the summary as one JSON object")
ADAPTIVE = typer.Option(
    False,
    "--adaptive",
    help="after k trials each, give further trials in rounds to "
    "the scenarios whose credible interval of pass^k still holds the goal, widest "
    "first, until none does or --budget trials in all have run",
)
BUDGET = typer.Option(
    None, "--budget", min=1, help="with --adaptive: trials of the run in all, at most"
)
GOAL = typer.Option(
    None,
    "--goal",
    help="with --adaptive: the pass^k to decide against, between 0 and 1 exclusive "
    "(default: each scenario's alert target, else PASSK_ALERT_MIN_PASS_HAT_K)",
)
CREDIBILITY = typer.Option(
    None,
    "--credibility",
    min=0.5,
    max=0.999,
    help="with --adaptive: the credible interval's mass (default 0.9)",
)
BATCH = typer.Option(
    None,
    "--batch",
    min=1,
    help="with --adaptive: trials per round at most (default: one per undecided scenario)",
)
VERDICT_TIMEOUT = typer.Option(
    None,
    "--verdict-timeout",
    min=1.0,
    help="with --adaptive: how long to wait for a round's verdicts, in seconds (default 600)",
)


VERDICT_TIMEOUT_S = 600.0  # --verdict-timeout's default


def register(app: typer.Typer, *, publish: Publisher) -> None:
    """`publish(scenarios, settings)`: `passk scenarios publish`'s, handed by the CLI
    (services/cli/wiring.py), for `passk run --publish`; it returns (id, status) pairs."""

    @app.command()
    def run(
        scenarios: Path = SCENARIOS,
        target: Path = TARGET,
        run_id: str = RUN_ID,
        trials: int = TRIALS,
        concurrency: int = CONCURRENCY,
        agent_version: str = AGENT_VERSION,
        user_model: str = USER_MODEL,
        publish_first: bool = PUBLISH_FIRST,
        wait: float | None = BROKER_WAIT,
        as_json: bool = AS_JSON,
        adaptive: bool = ADAPTIVE,
        budget: int = BUDGET,
        goal: float = GOAL,
        credibility: float | None = CREDIBILITY,
        batch: int = BATCH,
        verdict_timeout: float | None = VERDICT_TIMEOUT,
    ) -> None:
        """Run each scenario max(--trials, k) times against the agent with its simulated
        user, read the product's persisted session with the target's state probe, and
        publish both events per trial (trial ids <run_id>:<scenario_id>:<NNN>; trials of
        this run already in the log are skipped, so a re-run publishes nothing twice).
        Each trial names the scenario version (content hash) it ran, and is graded
        against that version: a scenario not published, or whose file differs from its
        latest published version, is exit 2 naming the file, unless --publish.
        Exit 4 when the broker is down or did not take a trial (within
        PASSK_PRODUCER_DELIVERY_TIMEOUT_S; the first such trial is named), 1 when a trial
        could not be published for another reason, 2 for invalid scenarios or target, 130
        when stopped (SIGINT: finished trials are published, with a summary)."""
        from services.contract.settings import get_settings
        from services.grading.adaptive import DEFAULT_CREDIBILITY
        from services.harness.adaptive_run import AdaptiveOptions
        from services.harness.drive import check_adaptive

        settings = get_settings()
        check_adaptive(adaptive, budget, goal, batch, credibility, verdict_timeout)
        _play_run(
            publish,
            scenarios,
            target,
            run_id,
            settings,
            trials=trials,
            concurrency=concurrency,
            agent_version=agent_version,
            user_model=user_model,
            publish_first=publish_first,
            wait=wait,
            as_json=as_json,
            adaptive=AdaptiveOptions(
                budget=budget,
                goal=goal,
                credibility=DEFAULT_CREDIBILITY if credibility is None else credibility,
                batch=batch,
                initial=trials,
                verdict_timeout_s=VERDICT_TIMEOUT_S if verdict_timeout is None else verdict_timeout,
            )
            if adaptive
            else None,
        )


def _play_run(
    publish: Publisher,
    scenarios: Path,
    target: Path,
    run_id: str,
    settings: Settings,
    *,
    trials: int,
    concurrency: int,
    agent_version: str | None,
    user_model: str | None,
    publish_first: bool,
    wait: float | None,
    as_json: bool,
    adaptive: AdaptiveOptions | None,
) -> NoReturn:
    """`passk run` after its options: the scenarios and target made ready (published
    first with `publish_first`), the trials played (adaptively with `adaptive`), the
    summary printed; exits with the run's code."""
    from services.harness.drive import prepare_run, run_trials
    from services.harness.render import print_run, sayer, trial_progress

    out, err = console(), console(stderr=True)
    prepared = prepare_run(
        scenarios,
        target,
        settings,
        wait=wait,
        publish_first=publish_first,
        publish=publish,
        user_model=user_model,
        say=sayer(err),
        adaptive=adaptive,
    )
    if adaptive is not None:
        _adaptive(
            prepared,
            run_id,
            settings,
            adaptive,
            concurrency=concurrency,
            agent_version=agent_version,
            out=out,
            err=err,
            as_json=as_json,
        )
    with trial_progress(err, f"run {run_id}", None) as progress:
        summary = run_trials(
            prepared,
            run_id,
            settings,
            trials=trials,
            concurrency=concurrency,
            agent_version=agent_version,
            progress=progress,
        )
    print_run(summary, run_id, out, err, as_json)
    raise typer.Exit(summary.exit_code())


def _adaptive(
    prepared: Prepared,
    run_id: str,
    settings: Settings,
    options: AdaptiveOptions,
    *,
    concurrency: int,
    agent_version: str | None,
    out: Console,
    err: Console,
    as_json: bool,
) -> NoReturn:
    """`passk run --adaptive`: k trials each, then rounds within the budget."""
    from services.harness.drive import run_adaptive
    from services.harness.render import trial_progress

    with trial_progress(err, f"run {run_id} (adaptive)", options.budget) as progress:
        result = run_adaptive(
            prepared,
            run_id,
            settings,
            options=options,
            concurrency=concurrency,
            agent_version=agent_version,
            progress=progress,
        )
    _adaptive_summary(result, out, err, as_json)


def _adaptive_summary(
    result: AdaptiveResult, out: Console, err: Console, as_json: bool
) -> NoReturn:
    """The adaptive run's answer (services.harness.render.print_adaptive); exit 1 when a
    trial was not published or a verdict never came, 130 when stopped."""
    from services.harness.render import print_adaptive

    print_adaptive(result, out, err, as_json)
    raise typer.Exit(result.exit_code())
