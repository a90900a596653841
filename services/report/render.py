"""What the report's commands print, with rich: a run's report, the deploy gate's decision,
a comparison, one trial, the windows, the dead letters, `passk wait`'s progress."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.contract.terminal import literal as escape
from services.report.compare import Comparison, RunFigures, ScenarioChange
from services.report.dead_letters import Listing
from services.report.domain import (
    GateDecision,
    RunReport,
    ScenarioReport,
    advisory_check_text,
    advisory_text,
)
from services.report.judge_cost import cost_lines, money
from services.report.trial_view import TrialView, json_cell, message_text

if TYPE_CHECKING:  # plotly loads with over_time: only for `passk windows`
    from services.report.over_time import WindowView

WHOSE_EXIT = {"session": "persisted session", "harness": "harness"}


def figure(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def verdict_cell(scenario: ScenarioReport) -> str:
    if scenario.insufficient:
        return "[yellow]insufficient trials[/yellow]"
    return "[green]✔[/green]" if scenario.scenario_passed else "[red]✘[/red]"


def scenarios_table(report: RunReport) -> Table:
    table = Table(title=f"run {report.run_id}: reliability per scenario")
    # Figures never wrap or shrink; a long scenario id folds instead.
    table.add_column("scenario", overflow="fold", min_width=10)
    spoiled = any(s.invalid for s in report.scenarios)
    sampled = any(s.sampled for s in report.scenarios)  # production traffic under sampling
    names = (
        "k",
        "n",
        "passed",
        "failed",
        "errors",
        *(("invalid",) if spoiled else ()),
        "pass@k",
        "pass^k",
        *(("sampled", "pass^k sampled") if sampled else ()),
    )
    for name in names:
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    table.add_column("passed?", justify="center", no_wrap=True)
    for s in report.scenarios:
        table.add_row(
            escape(s.scenario_id),
            str(s.k),
            str(s.n),
            str(s.passed),
            str(s.failed),
            str(s.errors),
            *((str(s.invalid),) if spoiled else ()),
            figure(s.pass_at_k),
            figure(s.pass_hat_k),
            *((str(s.n_sampled), figure(s.pass_hat_k_sampled)) if sampled else ()),
            verdict_cell(s),
        )
    return table


def sampling_lines(report: RunReport) -> list[str]:
    """Per scenario the LLM-judge sample left trials out of: its sampled figures, and what
    the sample saved."""
    out = []
    for s in report.scenarios:
        if not s.sampled:
            continue
        hat = "—" if s.pass_hat_k_sampled is None else f"{s.pass_hat_k_sampled:.3f}"
        tokens = (
            f"~{s.judge_tokens_saved_estimate} tokens"
            if s.judge_tokens_saved_estimate is not None
            else "tokens unknown"
        )
        cost = (
            f", an estimated {money(s.judge_cost_saved_estimate)}"
            if s.judge_cost_saved_estimate is not None
            else ""
        )
        out.append(
            f"sampled {s.scenario_id}: {s.n_sampled} of {s.n} trials in the LLM-judge sample, "
            f"{s.passed_sampled} passed: pass^k sampled {hat} "
            f"[{s.pass_hat_k_sampled_lower:.3f}, {s.pass_hat_k_sampled_upper:.3f}] (the "
            f"unbiased figure; pass^k over all trials counts unjudged ones as passing their "
            f"LLM judges); the sample saved {s.judge_calls_saved} LLM judge calls, "
            f"{tokens}{cost}"
        )
    return out


def failing_checks_table(report: RunReport) -> Table:
    table = Table(title="checks that fail most")
    table.add_column("check")
    table.add_column("failures", justify="right")
    table.add_column("share of trials", justify="right")
    table.add_column("example reason", overflow="fold")
    for c in report.failing_checks:
        # reasons quote transcripts and states, which may hold "[...]": never rich markup
        table.add_row(escape(c.check), str(c.failures), f"{c.share:.0%}", escape(c.example_reason))
    return table


def print_report(report: RunReport, console: Console) -> None:
    console.print(scenarios_table(report))
    if report.failing_checks:
        console.print(failing_checks_table(report))
    else:
        console.print("no check failed in this run")
    for flaky in report.flakiness:
        console.print(
            f"flaky: {escape(flaky.scenario_id)} ({flaky.passed} of {flaky.trials} passed): "
            f"{escape(flaky.summary)}",
            soft_wrap=True,
        )
    if report.without_state_gate:
        console.print(
            "graded without a state gate (completion: conversation): "
            + escape(", ".join(report.without_state_gate)),
            soft_wrap=True,
        )
    by_source: dict[str, int] = {}
    for trial in report.trials:
        if trial.exit_source:
            by_source[trial.exit_source] = by_source.get(trial.exit_source, 0) + 1
    if by_source:
        shown = ", ".join(f"{n} from the {WHOSE_EXIT[s]}" for s, n in sorted(by_source.items()))
        console.print(f"exits checked: {shown}", soft_wrap=True)
    for judge in report.advisory_judges:  # recorded, never failing a trial: apart
        console.print(escape(advisory_text(judge)), soft_wrap=True)
    for check in report.advisory_checks:
        console.print(escape(advisory_check_text(check)), soft_wrap=True)
    if report.invalid_trials:
        console.print(
            f"invalid (the simulated user failed a user check; out of n): "
            f"{len(report.invalid_trials)} trial(s)",
            soft_wrap=True,
        )
        for t in report.invalid_trials:
            checks = "; ".join(f"{c.check}: {c.reason}" for c in t.checks)
            console.print(f"  {escape(t.trial_id)}: {escape(checks)}", soft_wrap=True)
    if report.fixed_plan is not None:
        console.print(escape(report.fixed_plan.text()), soft_wrap=True)
    for line in sampling_lines(report):
        console.print(escape(line), soft_wrap=True)
    if report.judge_cost is not None:
        for line in cost_lines(report.judge_cost):
            console.print(escape(line), soft_wrap=True)
    versions = ", ".join(
        f"{s.scenario_id}@{'+'.join(s.scenario_versions)}"
        for s in report.scenarios
        if s.scenario_versions
    )
    if versions:
        console.print(f"scenario versions graded: {escape(versions)}", soft_wrap=True)
    if report.previous_run:
        console.print(
            f"previous run of these scenarios: {escape(report.previous_run)} "
            f"(passk compare --base {escape(report.previous_run)} --run {escape(report.run_id)})",
            soft_wrap=True,
        )


def print_gate(decision: GateDecision, console: Console) -> None:
    for scenario_id in decision.passed:
        console.print(f"[green]✔[/green] {escape(scenario_id)}")
    for failure in decision.failures:
        console.print(
            f"[red]✘[/red] {escape(failure.scenario_id)}: {escape(failure.why)}", soft_wrap=True
        )
    for line in decision.advisory:
        console.print(f"[yellow]•[/yellow] {escape(line)}", soft_wrap=True)
    style = {0: "green", 1: "red"}.get(decision.exit_code, "yellow")
    console.print(f"[{style}]{escape(decision.message)}[/{style}]", soft_wrap=True)


def interval(median: float, lower: float, upper: float) -> str:
    """A figure beside its interval: the posterior median, which lies in it (rounded
    alike, so the text never shows it outside)."""
    return f"{median:.2f} [{lower:.2f}, {upper:.2f}]"


def _interval(f: RunFigures | None) -> str:
    if f is None:
        return "—"
    return interval(f.pass_hat_k_median, f.pass_hat_k_lower, f.pass_hat_k_upper)


def _medians(change: ScenarioChange, field: str, unit: str = "") -> str:
    def one(f: RunFigures | None) -> str:
        value = getattr(f, field) if f else None
        return "—" if value is None else f"{value:g}{unit}"

    return f"{one(change.base)} → {one(change.run)}"


def print_comparison(comparison: Comparison, console: Console) -> None:
    table = Table(
        title=f"{comparison.run} against {comparison.base_run}: pass^k, posterior median "
        "[90% credible interval]"
    )
    table.add_column("scenario", overflow="fold", min_width=12)
    table.add_column(f"base {comparison.base_run}", overflow="fold", min_width=12)
    table.add_column(f"run {comparison.run}", overflow="fold", min_width=12)
    table.add_column("pass^k change", justify="right", no_wrap=True)
    table.add_column("regressed?", justify="center", no_wrap=True)
    costs = Table(title="tracked, never gating: medians, base → run")
    costs.add_column("scenario", overflow="fold", min_width=12)
    for name in ("tokens", "turns", "duration"):
        costs.add_column(name, no_wrap=True)
    for s in comparison.scenarios:
        table.add_row(
            escape(s.scenario_id),
            _interval(s.base),
            _interval(s.run),
            "—" if s.change is None else f"{s.change:+.3f}",
            "[red]REGRESSED[/red]" if s.regression else "no",
        )
        costs.add_row(
            escape(s.scenario_id),
            _medians(s, "tokens_median"),
            _medians(s, "turns_median"),
            _medians(s, "duration_s_median", " s"),
        )
    console.print(table)
    console.print(costs)
    if comparison.checks:
        checks = Table(title="failed checks, trials failed: base → run")
        checks.add_column("check", overflow="fold")
        checks.add_column("base", justify="right", no_wrap=True)
        checks.add_column("run", justify="right", no_wrap=True)
        for c in comparison.checks:
            checks.add_row(
                escape(c.check),
                f"{c.base_failures} ({c.base_share:.0%})",
                f"{c.run_failures} ({c.run_share:.0%})",
            )
        console.print(checks)
    if comparison.regressions:
        console.print(
            "[red]confidently worse (upper bound below the base's lower bound): "
            f"{escape(', '.join(comparison.regressions))}[/red]",
            soft_wrap=True,
        )
    else:
        console.print("no scenario is confidently worse than in the base run")


def print_view(view: TrialView, console: Console) -> None:
    """`passk show`: a trial, its checks, its state against the expectations, its judge
    calls and its transcript; every text from events printed literally."""
    e = escape
    colour = {"passed": "green", "failed": "red", "error": "yellow"}.get(view.outcome, "white")
    console.print(
        f"trial [bold]{e(view.trial_id)}[/bold] of scenario {e(view.scenario_id)} "
        f"(run {e(view.run_id)}): [{colour}]{e(view.outcome)}[/{colour}]; exit "
        f"{e(view.exit_reason or '—')} ({e(view.exit_source or 'unknown')})",
        soft_wrap=True,
    )
    checks = Table(title="checks")
    for col in ("check", "verdict", "reason"):
        checks.add_column(col, overflow="fold")
    for c in view.checks:
        mark = {"passed": "green", "failed": "red", "error": "yellow"}.get(c.verdict, "dim")
        checks.add_row(e(c.check), f"[{mark}]{e(c.verdict)}[/{mark}]", e(c.reason))
    console.print(checks)
    if view.expectations:
        state = Table(title="persisted state against the expectations (✘: the failing path)")
        for col in ("", "check", "expected", "actual", "reason"):
            state.add_column(col, overflow="fold")
        for x in view.expectations:
            mark = "[green]✔[/green]" if x.passed else "[bold red]✘[/bold red]"
            name = e(x.check) if x.passed else f"[bold red]{e(x.check)}[/bold red]"
            state.add_row(mark, name, e(json_cell(x.expected)), e(json_cell(x.actual)), e(x.reason))
        console.print(state)
    if view.judges:
        judges = Table(title="judge calls")
        for col in (
            "judge",
            "result",
            "model",
            "prompt tok",
            "completion tok",
            "latency ms",
            "attempts",
            "cache",
        ):
            judges.add_column(col, overflow="fold")
        for j in view.judges:
            judges.add_row(
                e(j.judge_id),
                e(j.result),
                e(j.model or "—"),
                str(j.input_tokens or 0),
                str(j.output_tokens or 0),
                "—" if j.latency_ms is None else f"{j.latency_ms:.0f}",
                str(j.attempts),
                "hit" if j.cached else "—",
            )
        console.print(judges)
    cost = f", estimated cost {money(view.judge_cost)}" if view.judge_cost is not None else ""
    console.print(
        f"judging: {view.judge_calls} model calls, {view.judge_input_tokens} prompt + "
        f"{view.judge_output_tokens} completion tokens{cost}",
        soft_wrap=True,
    )
    if view.transcript is None:
        console.print("transcript: not kept in the projection (the sink never stored it)")
        return
    console.print(f"transcript ({len(view.transcript)} messages):")
    for m in view.transcript:
        console.print(
            f"  [bold]{e(str(m.get('role', '?')))}[/bold]: {e(message_text(m))}", soft_wrap=True
        )


def print_windows(items: list[WindowView], out: Console) -> None:
    from services.report.over_time import stamp

    table = Table(title="reliability per event-time window (latest last)")
    for column in (
        "scenario",
        "window",
        "start (UTC)",
        "n",
        "passed",
        "failed",
        "errors",
        "invalid",
        "pass^k",
        "90% interval",
        "pass@k",
        "sampled",
        "pass^k sampled",
        "pass^k judged",
        "alert",
    ):
        numeric = column not in ("scenario", "window", "start (UTC)", "alert")
        table.add_column(column, justify="right" if numeric else "left")

    def num(v: float | None) -> str:
        return "—" if v is None else f"{v:.3f}"

    for w in items:
        table.add_row(
            escape(w.scenario_id),
            escape(w.window),
            stamp(w.window_start),
            str(w.n),
            str(w.passed),
            str(w.failed),
            str(w.errors),
            str(w.invalid),
            num(w.pass_hat_k),
            f"[{w.pass_hat_k_lower:.3f}, {w.pass_hat_k_upper:.3f}]",
            num(w.pass_at_k),
            str(w.n_sampled),
            num(w.pass_hat_k_sampled),
            num(w.judged_pass_hat_k),
            "[bold red]ALERT[/]" if w.alert_condition else "",
        )
    out.print(table)


def print_dead_letters(listing: Listing, out: Console) -> None:
    table = Table(title=f"dead letters ({sum(listing.counts.values())})")
    for column in ("at (UTC)", "reason", "source", "key", "excerpt"):
        table.add_column(column, overflow="fold")
    for x in listing.letters:
        # an excerpt is whatever a client sent: no terminal control, no markup, runs
        table.add_row(
            x.at.strftime("%Y-%m-%d %H:%M:%S"),
            escape(x.reason),
            escape(x.source),
            escape(x.key or ""),
            escape(x.excerpt),
        )
    out.print(table)
    for r, n in sorted(listing.counts.items()):
        out.print(f"{r}: {n}", markup=False, highlight=False)


@contextmanager
def verdict_progress(console: Console, total: int) -> Iterator[Callable[[int], None]]:
    """`passk wait`'s progress bar; yields what to call with each count of verdicts."""
    columns = (TextColumn("verdicts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("verdicts", total=total)
        yield lambda n: progress.update(task, completed=n)


def print_wrong_outcomes(
    wanted: list[dict[str, Any]], wrong: list[tuple[str, str, str]], console: Console
) -> None:
    """`passk wait --expected`: the trials that did not get their expected outcome, or
    that all did."""
    if wrong:
        table = Table(
            "trial", "expected", "got", title="trials that did not get their expected outcome"
        )
        for row in wrong:
            table.add_row(*row)
        console.print(table)
        return
    console.print(
        f"[green]{len(wanted)}/{len(wanted)} trials got exactly their expected outcome[/green]"
    )
