"""`passk ci` as a use case: scenarios and a target in; what was run, its report, the deploy
gate's decision and the comparison with a baseline out. Rendering (JUnit, Markdown, JSON,
the report page) is services/ci/render.py's; the command only writes what it is asked to.

    validate (scenarios, target, baseline)       nothing started yet: exit 2 stays cheap
    broker: the one that answers, else its own   services/ci/stack.py
    publish the scenarios (always)               so every trial is pinned to its file
    start the missing workers, run the trials    the conversations overlap the group joins
    wait for every verdict, gate, compare        services/report
    stop what it started                         also on failure and SIGINT/SIGTERM
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from services.ci.stack import CI_PROCESSORS, Stack, stack_for, start_workers
from services.contract.exits import NothingToJudge, Unreachable, UsageError
from services.contract.settings import Settings
from services.grading.adaptive import Observed, Standing, fixed_plan_trials, standing
from services.harness.adaptive_run import AdaptiveOptions
from services.report.compare import Comparison, compare_runs
from services.report.domain import GateDecision, RunReport, gate_decision

if TYPE_CHECKING:
    from schemas.scenario import Scenario
    from services.grading.scenario_loader import LoadResult
    from services.harness.adaptive_run import AdaptiveResult
    from services.harness.runner import UserFactory
    from services.harness.target import Target

Say = Callable[[str], None]


def process_age_s() -> float:
    """How long this process has run (the interpreter's start and the CLI's imports
    count as ci's own time too); 0 where /proc does not say."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)


def default_run_id(now: datetime | None = None) -> str:
    return f"ci-{(now or datetime.now(UTC)).strftime('%Y%m%dT%H%M%SZ')}"


@dataclass(frozen=True)
class CiOptions:
    scenarios: Path
    target: Path
    run_id: str
    trials: int = 0
    concurrency: int = 4
    agent_version: str | None = None
    user_model: str | None = None
    baseline: str | None = None
    fail_on_regression: bool = False
    verdict_timeout_s: float = 600.0
    adaptive: AdaptiveOptions | None = None  # `--adaptive`: rounds within a budget


@dataclass(frozen=True)
class CiAdaptive:
    """An adaptive run's answer (`--adaptive`): each scenario's interval and decision
    against its goal, counted from the run's final verdicts, and the budget."""

    budget: int
    trials_run: int
    credibility: float
    standings: list[Standing]

    @property
    def fixed_plan_trials(self) -> int:
        return fixed_plan_trials(self.standings, self.credibility)

    def of(self, scenario_id: str) -> Standing | None:
        return next((s for s in self.standings if s.scenario_id == scenario_id), None)


def adaptive_answer(played: AdaptiveResult, report: RunReport) -> CiAdaptive:
    """The adaptive run's standings again from the report's counts (every verdict in by
    now, those that came after the loop's last look too), at the run's credibility."""
    counted = {s.scenario_id: s for s in report.scenarios}
    standings = []
    for s in played.standings:
        r = counted.get(s.scenario_id)
        observed = Observed(
            s.scenario_id,
            k=s.k,
            goal=s.goal,
            trials=s.trials if r is None else r.n + r.invalid,
            passed=s.passed if r is None else r.passed,
            failed=s.failed if r is None else r.failed,
            errors=s.errors if r is None else r.errors,
            invalid=s.invalid if r is None else r.invalid,
        )
        standings.append(standing(observed, played.credibility))
    return CiAdaptive(
        budget=played.budget,
        trials_run=played.trials_run,
        credibility=played.credibility,
        standings=standings,
    )


@dataclass
class CiResult:
    run_id: str
    report: RunReport
    decision: GateDecision
    exit_code: int
    scenario_versions: dict[str, str]  # scenario id -> the content hash every trial ran
    sources: dict[str, str]  # scenario id -> its file
    published: dict[str, str]  # scenario id -> new | updated | unchanged
    comparison: Comparison | None = None
    regressions: list[str] = field(default_factory=list)
    own_broker: bool = False
    started: list[str] = field(default_factory=list)  # what ci started (and stopped)
    reused: list[str] = field(default_factory=list)  # processors it found running
    timings: dict[str, float] = field(default_factory=dict)  # seconds, by phase
    adaptive: CiAdaptive | None = None  # `--adaptive`: the decisions and the budget

    @property
    def gate_passed(self) -> bool:
        return self.exit_code == 0


class Stopped(Exception):
    """SIGINT or SIGTERM: everything started is stopped, then exit 130."""


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """SIGTERM (and SIGINT) raise Stopped in the main thread, so the stack's `finally`
    stops what was started; the harness installs its own handlers while it plays."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signal.Signals(signum).name)

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in before:
        signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _reinstall(handler_of: dict[signal.Signals, Any]) -> None:
    for sig, handler in handler_of.items():
        signal.signal(sig, handler)


def run_ci(
    options: CiOptions,
    settings: Settings,
    *,
    say: Say = lambda line: None,
    on_trial: Callable[[str, str], None] = lambda trial_id, what: None,
) -> CiResult:
    """Everything `passk ci` does but writing its outputs. Raises UsageError (2),
    NothingToJudge (3), Unreachable (4) and Stopped (130) with everything stopped."""
    began = time.monotonic()
    timings: dict[str, float] = {"startup_s": process_age_s()}
    loaded, target = _validate(options, say)
    versions = {s.id: str(s.version) for s in loaded.scenarios}
    baseline: list[RunReport] = []

    def meanwhile() -> None:
        _meanwhile(options, settings, baseline)

    with stack_for(settings, say=say, meanwhile=meanwhile) as stack:
        base = baseline[0] if baseline else None
        timings.update(stack.timings)
        mark = time.monotonic()
        published = _publish(loaded.scenarios, stack, say)
        timings["publish_s"] = time.monotonic() - mark
        mark = time.monotonic()
        start_workers(stack, say, CI_PROCESSORS)
        timings["workers_spawn_s"] = time.monotonic() - mark
        users = _users(options, loaded.scenarios, stack, say)
        mark = time.monotonic()
        expected, played = _play(options, loaded.scenarios, target, users, stack, say, on_trial)
        timings["conversations_s"] = time.monotonic() - mark
        mark = time.monotonic()
        _await(options, settings, stack, expected)
        timings["last_verdict_s"] = time.monotonic() - mark
        result = _decide(options, settings, base, versions, loaded.sources, published, stack)
        if played is not None:
            result.adaptive = adaptive_answer(played, result.report)
    timings.update({k: v for k, v in stack.timings.items() if k == "teardown_s"})
    timings["total_s"] = timings["startup_s"] + time.monotonic() - began
    timings["own_s"] = timings["total_s"] - timings.get("conversations_s", 0.0)
    result.timings = timings
    return result


def _validate(options: CiOptions, say: Say) -> tuple[LoadResult, Target]:
    """The scenarios (each with a user to play) and the target: nothing started yet, so
    exit 2 stays cheap."""
    from services.grading.scenario_loader import validate_paths
    from services.harness.drive import check_budget
    from services.harness.target import InvalidTarget, load_target

    loaded = validate_paths([options.scenarios])
    if loaded.errors:
        raise UsageError(
            f"{len(loaded.errors)} problem(s) in {options.scenarios}: "
            + "; ".join(str(e) for e in loaded.errors[:5])
            + "; nothing was run"
        )
    for warning in loaded.warnings:
        say(f"warning: {warning}")
    if not loaded.scenarios:
        raise UsageError(f"no scenario in {options.scenarios}")
    without_user = [s.id for s in loaded.scenarios if s.user is None]
    if without_user:
        raise UsageError(
            f"{options.scenarios}: scenario(s) without a `user:` section, so no "
            f"user to play: {', '.join(without_user)}; nothing was run"
        )
    check_budget(loaded.scenarios, options.adaptive)
    try:
        return loaded, load_target(options.target, os.environ)
    except InvalidTarget as exc:
        raise UsageError(
            f"invalid target file {exc.file}: field {exc.field}: {exc.problem}"
        ) from None


def _meanwhile(options: CiOptions, settings: Settings, baseline: list[RunReport]) -> None:
    """While a broker of its own boots: the rest of ci's imports, and the baseline (an
    unknown one is exit 2; the broker just started is stopped with the stack)."""
    from services.report.load import load_report

    if options.baseline:
        base, runs, url = load_report(options.baseline, settings.database_url, settings)
        if not base.trials:
            raise UsageError(
                f"--baseline {options.baseline!r}: no trial verdicts in the projection "
                f"({url}). Known runs: {', '.join(runs[:10]) or 'none'}"
            )
        baseline.append(base)
    import services.harness.play
    import services.report.wait
    import services.scenarios.publish  # noqa: F401


def _publish(scenarios: Sequence[Scenario], stack: Stack, say: Say) -> dict[str, str]:
    """Every scenario published (always), so every trial is pinned to its file."""
    from services.scenarios.publish import publish_scenarios

    published: dict[str, str] = {
        p.scenario.id: str(p.status) for p in publish_scenarios(scenarios, stack.settings)
    }
    changed = [f"{sid} ({status})" for sid, status in published.items() if status != "unchanged"]
    say(
        f"ci: published {', '.join(changed)}"
        if changed
        else "ci: every scenario already published as it is"
    )
    return published


def _users(
    options: CiOptions, scenarios: Sequence[Scenario], stack: Stack, say: Say
) -> UserFactory:
    """Who plays the users; the stand-in listening when it plays them."""
    from services.harness.play import users_for

    users, stand_in = users_for(scenarios, stack.settings, options.user_model, stack.standin_url)
    if stand_in:
        say(stand_in)
    if stack.standin is not None and users.model_client is not None:
        from services.ci.stack import wait_listening

        port = int((stack.standin_url or "").rsplit(":", 1)[1].split("/")[0])
        wait_listening(port, stack.standin, 60)
    return users


def _play(
    options: CiOptions,
    scenarios: Sequence[Scenario],
    target: Target,
    users: UserFactory,
    stack: Stack,
    say: Say,
    on_trial: Callable[[str, str], None],
) -> tuple[int, AdaptiveResult | None]:
    """The trials run (fixed or adaptive) against the target; how many verdicts to wait
    for, and the adaptive run's result. Stopped when interrupted, Unreachable when a trial
    was not published."""
    from services.harness.play import play

    adaptive: AdaptiveResult | None = None
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if options.adaptive is not None:
            from services.harness.play import play_adaptive

            adaptive = play_adaptive(
                scenarios,
                target,
                options.run_id,
                stack.settings,
                users=users,
                options=options.adaptive,
                concurrency=options.concurrency,
                agent_version=options.agent_version,
                on_trial=on_trial,
                on_round=lambda number, given: say(
                    f"ci: round {number}: "
                    + ", ".join(f"{sid} +{count}" for sid, count in given.items())
                ),
            )
            summary = adaptive.summary
            # every trial of the run in the log is to be waited for, none is skipped
            summary.published, summary.skipped = adaptive.trials_run, 0
        else:
            summary = play(
                scenarios,
                target,
                options.run_id,
                stack.settings,
                users=users,
                trials=options.trials,
                concurrency=options.concurrency,
                agent_version=options.agent_version,
                on_trial=on_trial,
            )
    finally:
        _reinstall(handlers)  # the harness's loop leaves SIG_DFL behind for SIGTERM
    if summary.interrupted:
        raise Stopped(f"{summary.interrupted} trial(s) not run")
    if summary.not_published:
        raise Unreachable(
            f"{summary.not_published} trial(s) could not be published: "
            f"{summary.errors[0][1] if summary.errors else ''}; run the "
            "same --run-id again to retry them"
        )
    return summary.published + summary.skipped, adaptive


def _await(options: CiOptions, settings: Settings, stack: Stack, expected: int) -> None:
    """Every verdict in the projection, or Unreachable after the verdict timeout."""
    from services.report.wait import await_verdicts

    outcomes = await_verdicts(
        settings.database_url,
        options.run_id,
        expected,
        timeout=options.verdict_timeout_s,
        poll_s=0.2,
        check=stack.check,
    )
    if len(outcomes) < expected:
        raise Unreachable(
            f"timed out after {options.verdict_timeout_s:g} s: "
            f"{len(outcomes)} of {expected} trials have a verdict"
        )


def _decide(
    options: CiOptions,
    settings: Settings,
    base: RunReport | None,
    versions: dict[str, str],
    sources: dict[str, str],
    published: dict[str, str],
    stack: Stack,
) -> CiResult:
    from services.report.load import load_report

    report, _, url = load_report(options.run_id, settings.database_url, settings)
    if not report.trials:
        raise NothingToJudge(f"run {options.run_id!r} has no trial verdicts ({url})")
    decision = gate_decision(report)
    comparison = compare_runs(base, report) if base is not None else None
    regressions = comparison.regressions if comparison else []
    code = decision.exit_code
    if code == 0 and options.fail_on_regression and regressions:
        code = 1
    return CiResult(
        run_id=options.run_id,
        report=report,
        decision=decision,
        exit_code=code,
        scenario_versions=versions,
        sources=sources,
        published=published,
        comparison=comparison,
        regressions=regressions,
        own_broker=stack.own_broker,
        started=[p.name for p in stack.started],
        reused=list(stack.reused),
    )
