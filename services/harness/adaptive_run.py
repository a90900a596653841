"""`passk run --adaptive`: rounds of trials, each allocated by `services.grading.adaptive`
from the verdicts the pipeline gave (read from the projection, as `passk wait` does), never
from the harness's own guess at an outcome.

A round's trials are all published before the next round is decided, and the next round
waits until every trial of the run in the log has its verdict. The budget counts every
trial of the run in the log, those of an earlier invocation with the same run id too, so a
re-run with the same id and budget adds no trial once the first one finished.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from schemas.scenario import Scenario
from services.grading.adaptive import (
    DEFAULT_CREDIBILITY,
    Planned,
    Standing,
    fixed_plan_trials,
    next_numbers,
    next_round,
    observe,
    standing,
)
from services.harness.domain import PlannedTrial, RunSummary, trial_id

# Trials run (their summary) and the ids of those now in the log.
Play = Callable[[list[PlannedTrial]], Awaitable[tuple[RunSummary, set[str]]]]
Verdicts = Callable[[], dict[str, str]]  # trial id -> outcome, for the run (blocking)


@dataclass(frozen=True)
class AdaptiveOptions:
    budget: int
    goal: float | None = None  # else each scenario's alert target, else the default goal
    credibility: float = DEFAULT_CREDIBILITY
    batch: int | None = None
    initial: int = 0  # --trials: initial trials per scenario (at least k)
    verdict_timeout_s: float = 600.0
    poll_s: float = 1.0


@dataclass
class AdaptiveResult:
    run_id: str
    budget: int
    credibility: float
    standings: list[Standing]
    trials_run: int  # trials of the run in the log, earlier invocations' included
    added: int = 0  # published by this invocation
    rounds: int = 0
    summary: RunSummary = field(default_factory=RunSummary)
    late: list[str] = field(default_factory=list)  # trials still without a verdict

    @property
    def fixed_plan_trials(self) -> int:
        return fixed_plan_trials(self.standings, self.credibility)

    def exit_code(self) -> int:
        code = self.summary.exit_code()
        if code:
            return code
        return 1 if self.late else 0

    def as_json(self) -> dict[str, object]:
        fixed = self.fixed_plan_trials
        return {
            "run_id": self.run_id,
            "trials_run": self.trials_run,
            "budget": self.budget,
            "scenarios": [
                s.as_json() | {"k": s.k, "goal": s.goal, "trials": s.trials} for s in self.standings
            ],
            "added": self.added,
            "rounds": self.rounds,
            "credibility": self.credibility,
            "fixed_plan_trials": fixed,
            "late": self.late,
        }


def goal_of(scenario: Scenario, goal: float | None, default: float) -> float:
    """--goal, else the scenario's alert target, else PASSK_ALERT_MIN_PASS_HAT_K."""
    if goal is not None:
        return goal
    if scenario.alert is not None and scenario.alert.min_pass_hat_k is not None:
        return scenario.alert.min_pass_hat_k
    return default


def numbers_in(run_id: str, scenarios: list[Scenario], trial_ids: set[str]) -> dict[str, set[int]]:
    """The trial numbers of each scenario among a run's trial ids."""
    found: dict[str, set[int]] = {s.id: set() for s in scenarios}
    for s in scenarios:
        prefix = f"{run_id}:{s.id}:"
        for t in trial_ids:
            rest = t[len(prefix) :]
            if t.startswith(prefix) and rest.isdigit():
                found[s.id].add(int(rest))
    return found


def _merge(into: RunSummary, more: RunSummary) -> None:
    for name in (
        "planned",
        "skipped",
        "run",
        "published",
        "not_published",
        "interrupted",
        "sessions_found",
    ):
        setattr(into, name, getattr(into, name) + getattr(more, name))
    into.exits.update(more.exits)
    into.errors.extend(more.errors)


async def run_adaptive(
    *,
    run_id: str,
    scenarios: list[Scenario],
    options: AdaptiveOptions,
    default_goal: float,
    in_log: set[str],
    play: Play,
    verdicts: Verdicts,
    on_round: Callable[[int, dict[str, int]], None] = lambda r, a: None,
) -> AdaptiveResult:
    by_id = {s.id: s for s in scenarios}
    planned = [
        Planned(s.id, s.k, goal_of(s, options.goal, default_goal), max(options.initial, s.k))
        for s in scenarios
    ]
    numbers = numbers_in(run_id, scenarios, in_log)
    # Trials of the run in the log for scenarios not run now count against the budget too.
    elsewhere = len(in_log) - sum(len(ns) for ns in numbers.values())
    result = AdaptiveResult(
        run_id=run_id,
        budget=options.budget,
        credibility=options.credibility,
        standings=[],
        trials_run=0,
    )
    while True:
        wanted = {trial_id(run_id, sid, n): (sid, n) for sid, ns in numbers.items() for n in ns}
        stopped = bool(result.summary.interrupted or result.summary.not_published)
        got = await _verdicts_of(set(wanted), verdicts, options, wait=not stopped)
        outcomes: dict[str, dict[int, str]] = {sid: {} for sid in numbers}
        for tid, outcome in got.items():
            if tid in wanted:
                sid, n = wanted[tid]
                outcomes[sid][n] = outcome
        seen = observe(planned, numbers, outcomes)
        result.standings = [standing(o, options.credibility) for o in seen]
        result.trials_run = elsewhere + sum(len(ns) for ns in numbers.values())
        result.late = sorted(set(wanted) - set(got))
        if stopped or result.late:
            return result
        given = next_round(
            seen,
            budget=max(options.budget - elsewhere, 0),
            credibility=options.credibility,
            batch=options.batch,
        )
        if not given:
            return result
        result.rounds += 1
        on_round(result.rounds, given)
        todo = _round_plan(run_id, by_id, numbers, given)
        summary, sent = await play(todo)
        _merge(result.summary, summary)
        result.added += len(sent)
        for sid, ns in numbers_in(run_id, scenarios, sent).items():
            numbers[sid] |= ns


def _round_plan(
    run_id: str, by_id: dict[str, Scenario], numbers: dict[str, set[int]], given: dict[str, int]
) -> list[PlannedTrial]:
    """The round's trials, scenarios interleaved (widest first) as plan_trials does."""
    chosen = {sid: next_numbers(numbers[sid], count) for sid, count in given.items()}
    todo: list[PlannedTrial] = []
    for i in range(max(given.values())):
        for sid in given:
            if i < len(chosen[sid]):
                n = chosen[sid][i]
                todo.append(PlannedTrial(by_id[sid], n, trial_id(run_id, sid, n)))
    return todo


async def _verdicts_of(
    wanted: set[str], verdicts: Verdicts, options: AdaptiveOptions, *, wait: bool
) -> dict[str, str]:
    """The run's verdicts once every wanted trial has one, or what there is at the
    deadline (or at once, when not waiting)."""
    deadline = time.monotonic() + options.verdict_timeout_s
    while True:
        got = await asyncio.to_thread(verdicts)
        if not wait or wanted <= set(got) or time.monotonic() >= deadline:
            return got
        await asyncio.sleep(options.poll_s)
