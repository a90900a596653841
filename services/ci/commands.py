"""`passk ci`: gate a pull request in one command (docs/ci.md)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from services.contract.exits import UsageError

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc}") from exc


def register(app: typer.Typer) -> None:
    @app.command()
    def ci(
        scenarios: Path = typer.Option(..., "--scenarios", exists=True,
                                       help="scenario YAML files or a directory"),
        target: Path = typer.Option(..., "--target", exists=True, dir_okay=False,
                                    help="the target file (agent and state)"),
        run_id: str = typer.Option(None, "--run-id",
                                   help="default: ci-<UTC yyyymmddThhmmssZ>"),
        trials: int = typer.Option(0, "--trials", min=0, help="trials per scenario (at least k)"),
        concurrency: int = typer.Option(4, "--concurrency", min=1, max=256,
                                        help="trials talking to the agent at once"),
        agent_version: str = typer.Option(None, "--agent-version"),
        user_model: str = typer.Option(None, "--user-model", envvar="PASSK_USER_MODEL",
                                       help="model playing users without a script"),
        baseline: str = typer.Option(
            None, "--baseline", help="an earlier run: the delta per scenario, marked when "
                                     "confidently worse (as `passk compare` decides)"),
        fail_on_regression: bool = typer.Option(
            False, "--fail-on-regression",
            help="exit 1 when a scenario is confidently worse than --baseline"),
        junit: Path = typer.Option(None, "--junit", dir_okay=False,
                                   help="write JUnit XML here (one testcase per scenario)"),
        markdown: Path = typer.Option(None, "--markdown", dir_okay=False,
                                      help="write the pull-request comment (Markdown) here"),
        html: Path = typer.Option(None, "--html", dir_okay=False,
                                  help="write the report page here"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
        timeout: float = typer.Option(600, "--timeout", min=1,
                                      help="seconds to wait for the last verdict"),
        adaptive: bool = typer.Option(
            False, "--adaptive", help="as `passk run --adaptive`: after k trials each, more "
            "only for the scenarios whose pass^k interval still holds the goal, widest first"),
        budget: int = typer.Option(None, "--budget", min=1,
                                   help="with --adaptive: trials of the run in all, at most"),
        goal: float = typer.Option(None, "--goal", min=0.0, max=1.0,
                                   help="with --adaptive: the pass^k to decide against"),
        credibility: float = typer.Option(0.9, "--credibility", min=0.5, max=0.999,
                                          help="with --adaptive: the interval's mass"),
        batch: int = typer.Option(None, "--batch", min=1,
                                  help="with --adaptive: trials per round at most"),
    ) -> None:
        """Gate a pull request: use the broker that answers at KAFKA_BOOTSTRAP_SERVERS, or
        start one of its own (and the processors that are not running, and the judge
        stand-in when no model is configured); publish the scenarios, run them against the
        target, wait for every verdict, apply the deploy gate, stop everything it started
        (also on failure, SIGINT and SIGTERM). Exit 0 every scenario passed; 1 not reliable
        (or, with --fail-on-regression, confidently worse than --baseline); 2 usage or
        invalid scenarios; 3 no trials; 4 infrastructure; 130 stopped."""
        from services.ci.pipeline import CiOptions, Stopped, default_run_id, run_ci
        from services.ci.pipeline import stopping_on_signals as stopping
        from services.ci.render import ci_json, junit_xml
        from services.ci.render import markdown as render_markdown
        from services.clikit import console as make_console
        from services.contract.settings import get_settings
        from services.report.render import print_comparison, print_gate, print_report

        settings = get_settings()
        err = make_console(stderr=True)

        def say(line: str) -> None:
            err.print(line, soft_wrap=True, markup=False, highlight=False)

        from services.contract.exits import UsageError
        from services.harness.adaptive_run import AdaptiveOptions

        if adaptive and budget is None:
            raise UsageError("--adaptive needs --budget N (trials of the run in all)")
        if not adaptive and any(v is not None for v in (budget, goal, batch)):
            raise UsageError("--budget, --goal and --batch go with --adaptive")
        options = CiOptions(
            scenarios=scenarios, target=target, run_id=run_id or default_run_id(),
            trials=trials, concurrency=concurrency, agent_version=agent_version,
            user_model=user_model, baseline=baseline, fail_on_regression=fail_on_regression,
            verdict_timeout_s=timeout,
            adaptive=AdaptiveOptions(budget=budget, goal=goal, credibility=credibility,
                                     batch=batch, initial=trials,
                                     verdict_timeout_s=timeout) if adaptive else None)
        say(f"ci: run {options.run_id}")
        try:
            with stopping():
                result = run_ci(options, settings, say=say)
        except Stopped as exc:
            say(f"ci: stopped ({exc}); everything it started is stopped")
            raise typer.Exit(130) from None
        if junit is not None:
            _write(junit, junit_xml(result))
        if markdown is not None:
            _write(markdown, render_markdown(result))
        if html is not None:
            from services.report.load import report_page

            _write(html, report_page(result.report, settings.database_url, settings))
        if as_json:
            typer.echo(json.dumps(ci_json(result), ensure_ascii=False))
        else:
            out = make_console()
            print_report(result.report, out)
            if result.comparison is not None:
                print_comparison(result.comparison, out)
        print_gate(result.decision, err)
        for name, path in (("JUnit", junit), ("Markdown", markdown), ("report page", html)):
            if path is not None:
                say(f"{name}: {path.resolve()}")
        t = result.timings
        say(f"ci: {t.get('total_s', 0):.1f} s in all, {t.get('conversations_s', 0):.1f} s "
            f"of conversations, {t.get('own_s', 0):.1f} s of its own "
            f"(broker {t.get('broker_s', 0):.1f}, last verdict "
            f"{t.get('last_verdict_s', 0):.1f}, teardown {t.get('teardown_s', 0):.1f})")
        if options.fail_on_regression and result.regressions and result.exit_code == 1:
            say(f"ci: confidently worse than {baseline}: {', '.join(result.regressions)}")
        raise typer.Exit(result.exit_code)
