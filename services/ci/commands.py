"""`passk ci`: gate a pull request in one command (docs/ci.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from services.clikit import console

if TYPE_CHECKING:
    from rich.console import Console

    from services.ci.pipeline import CiOptions, CiResult
    from services.contract.settings import Settings

# Imports inside functions here are deferred: every command module loads on each `passk` run.


SCENARIOS = typer.Option(..., "--scenarios", exists=True, help="scenario YAML files or a directory")
TARGET = typer.Option(
    ..., "--target", exists=True, dir_okay=False, help="the target file (agent and state)"
)
RUN_ID = typer.Option(None, "--run-id", help="default: ci-<UTC yyyymmddThhmmssZ>")
TRIALS = typer.Option(0, "--trials", min=0, help="trials per scenario (at least k)")
CONCURRENCY = typer.Option(
    4, "--concurrency", min=1, max=256, help="trials talking to the agent at once"
)
AGENT_VERSION = typer.Option(None, "--agent-version")
USER_MODEL = typer.Option(
    None, "--user-model", envvar="PASSK_USER_MODEL", help="model playing users without a script"
)
BASELINE = typer.Option(
    None,
    "--baseline",
    help="an earlier run: the delta per scenario, marked when "
    "confidently worse (as `passk compare` decides)",
)
FAIL_ON_REGRESSION = typer.Option(
    False,
    "--fail-on-regression",
    help="exit 1 when a scenario is confidently worse than --baseline",
)
JUNIT = typer.Option(
    None, "--junit", dir_okay=False, help="write JUnit XML here (one testcase per scenario)"
)
MARKDOWN = typer.Option(
    None, "--markdown", dir_okay=False, help="write the pull-request comment (Markdown) here"
)
HTML = typer.Option(None, "--html", dir_okay=False, help="write the report page here")
AS_JSON = typer.Option(False, "--json", help="print one JSON object on stdout")
TIMEOUT = typer.Option(600, "--timeout", min=1, help="seconds to wait for the last verdict")
ADAPTIVE = typer.Option(
    False,
    "--adaptive",
    help="as `passk run --adaptive`: after k trials each, more "
    "only for the scenarios whose pass^k interval still holds the goal, widest first",
)
BUDGET = typer.Option(
    None, "--budget", min=1, help="with --adaptive: trials of the run in all, at most"
)
GOAL = typer.Option(
    None,
    "--goal",
    help="with --adaptive: the pass^k to decide against, between 0 and 1 exclusive",
)
CREDIBILITY = typer.Option(
    None,
    "--credibility",
    min=0.5,
    max=0.999,
    help="with --adaptive: the interval's mass (default 0.9)",
)
BATCH = typer.Option(None, "--batch", min=1, help="with --adaptive: trials per round at most")


def ci(
    scenarios: Path = SCENARIOS,
    target: Path = TARGET,
    run_id: str = RUN_ID,
    trials: int = TRIALS,
    concurrency: int = CONCURRENCY,
    agent_version: str = AGENT_VERSION,
    user_model: str = USER_MODEL,
    baseline: str = BASELINE,
    fail_on_regression: bool = FAIL_ON_REGRESSION,
    junit: Path = JUNIT,
    markdown: Path = MARKDOWN,
    html: Path = HTML,
    as_json: bool = AS_JSON,
    timeout: float = TIMEOUT,
    adaptive: bool = ADAPTIVE,
    budget: int = BUDGET,
    goal: float = GOAL,
    credibility: float | None = CREDIBILITY,
    batch: int = BATCH,
) -> None:
    """Gate a pull request: use the broker that answers at KAFKA_BOOTSTRAP_SERVERS, or
    start one of its own (and the processors that are not running, and the judge
    stand-in when no model is configured); publish the scenarios, run them against the
    target, wait for every verdict, apply the deploy gate, stop everything it started
    (also on failure, SIGINT and SIGTERM). Exit 0 every scenario passed; 1 not reliable
    (or, with --fail-on-regression, confidently worse than --baseline); 2 usage or
    invalid scenarios; 3 no trials; 4 infrastructure; 130 stopped."""
    from services.ci.outputs import write_outputs
    from services.ci.pipeline import CiOptions, default_run_id
    from services.ci.render import closing_lines
    from services.contract.settings import get_settings
    from services.grading.adaptive import DEFAULT_CREDIBILITY
    from services.harness.adaptive_run import AdaptiveOptions
    from services.harness.drive import check_adaptive

    settings = get_settings()
    err = console(stderr=True)

    def say(line: str) -> None:
        err.print(line, soft_wrap=True, markup=False, highlight=False)

    check_adaptive(adaptive, budget, goal, batch, credibility)
    options = CiOptions(
        scenarios=scenarios,
        target=target,
        run_id=run_id or default_run_id(),
        trials=trials,
        concurrency=concurrency,
        agent_version=agent_version,
        user_model=user_model,
        baseline=baseline,
        fail_on_regression=fail_on_regression,
        verdict_timeout_s=timeout,
        adaptive=AdaptiveOptions(
            budget=budget,
            goal=goal,
            credibility=DEFAULT_CREDIBILITY if credibility is None else credibility,
            batch=batch,
            initial=trials,
            verdict_timeout_s=timeout,
        )
        if adaptive
        else None,
    )
    say(f"ci: run {options.run_id}")
    result = _run(options, settings, say)
    written = write_outputs(result, settings, junit=junit, markdown=markdown, html=html)
    _print(result, as_json, err)
    for line in closing_lines(result, written, baseline, fail_on_regression):
        say(line)
    raise typer.Exit(result.exit_code)


def _run(options: CiOptions, settings: Settings, say: Callable[[str], None]) -> CiResult:
    """run_ci, stopped by SIGINT or SIGTERM (exit 130, everything it started stopped)."""
    from services.ci.pipeline import Stopped, run_ci
    from services.ci.pipeline import stopping_on_signals as stopping

    try:
        with stopping():
            return run_ci(options, settings, say=say)
    except Stopped as exc:
        say(f"ci: stopped ({exc}); everything it started is stopped")
        raise typer.Exit(130) from None


def _print(result: CiResult, as_json: bool, err: Console) -> None:
    """The report and the comparison (or the JSON) on stdout, the gate's answer on err."""
    from services.ci.render import ci_json
    from services.report.render import print_comparison, print_gate, print_report

    if as_json:
        typer.echo(json.dumps(ci_json(result), ensure_ascii=False))
    else:
        out = console()
        print_report(result.report, out)
        if result.comparison is not None:
            print_comparison(result.comparison, out)
    print_gate(result.decision, err)


def register(app: typer.Typer) -> None:
    app.command()(ci)
