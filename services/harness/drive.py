"""`passk run`'s work, as functions returning values: the scenarios and the target made
ready (validated, pinned or published, the users chosen), then the trials played, fixed
or adaptive. What is said on the way goes to `say` (text, rich style or None)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from schemas.scenario import Scenario
from services.contract.exits import UsageError
from services.contract.settings import Settings
from services.harness.adaptive_run import AdaptiveOptions, AdaptiveResult
from services.harness.domain import PlannedTrial, RunSummary
from services.harness.runner import UserFactory
from services.harness.target import Target

Say = Callable[[str, str | None], None]
Publish = Callable[[Sequence[Any], Any], list[tuple[str, str]]]


class TrialProgress(Protocol):
    """What shows the progress of a run (services.harness.render.trial_progress)."""

    def planned(self, todo: list[PlannedTrial]) -> None: ...

    def trial(self, trial_id: str, what: str) -> None: ...

    def round(self, number: int, given: dict[str, int]) -> None: ...


@dataclass(frozen=True)
class Prepared:
    scenarios: list[Scenario]
    target: Target
    target_file: Path
    users: UserFactory


def check_adaptive(
    adaptive: bool,
    budget: int | None,
    goal: float | None,
    batch: int | None,
    credibility: float | None = None,
    verdict_timeout: float | None = None,
) -> None:
    """--budget, --goal, --batch, --credibility and --verdict-timeout (`passk run`'s; `passk
    ci`'s --timeout is not only adaptive) go with --adaptive, which needs --budget; an
    option given without it is refused, not ignored. --goal is strictly between 0 and 1
    (at 0 or 1 every decision is settled before any trial), and not NaN (its own check:
    typer's range would call NaN "above 1")."""
    if adaptive and budget is None:
        raise UsageError("--adaptive needs --budget N (trials of the run in all)")
    given = {
        "--budget": budget,
        "--goal": goal,
        "--batch": batch,
        "--credibility": credibility,
        "--verdict-timeout": verdict_timeout,
    }
    if not adaptive and any(v is not None for v in given.values()):
        named = ", ".join(name for name, v in given.items() if v is not None)
        raise UsageError(
            f"{named} given without --adaptive: options that go with --adaptive are "
            "refused without it, not ignored"
        )
    if goal is not None and not 0.0 < goal < 1.0:
        raise UsageError(
            f"--goal must be a number between 0 and 1 exclusive (got {goal}): at 0 or 1 "
            "every scenario's decision is known before any trial"
        )


def check_budget(scenarios: Sequence[Scenario], adaptive: AdaptiveOptions | None) -> None:
    """--budget must cover the trials every scenario first gets (its k, or --trials when
    more) before any round: below that some scenario never reaches k trials, so nothing
    could be decided about it, and the summary's fixed-plan comparison would be made up.
    UsageError naming the budget and the sum; checked before anything is published."""
    if adaptive is None:
        return
    first = sum(max(adaptive.initial, s.k) for s in scenarios)
    if adaptive.budget >= first:
        return
    each = "k" if adaptive.initial == 0 else f"max(--trials {adaptive.initial}, k)"
    raise UsageError(
        f"--budget {adaptive.budget} is below the {first} trials the {len(scenarios)} "
        f"scenario(s) first get (the sum of their {each}: "
        f"{' + '.join(str(max(adaptive.initial, s.k)) for s in scenarios[:20])}"
        f"{' + …' if len(scenarios) > 20 else ''}), before any adaptive round; "
        f"give --budget {first} or more; nothing was run"
    )


def prepare_run(
    scenarios: Path,
    target: Path,
    settings: Settings,
    *,
    wait: float | None,
    publish_first: bool,
    publish: Publish,
    user_model: str | None,
    say: Say,
    adaptive: AdaptiveOptions | None = None,
) -> Prepared:
    """The scenarios of `scenarios` validated (each with a user to play), the target file
    loaded, the broker reached, the scenarios published (`publish_first`) or checked to be
    as published, and the users' factory. UsageError naming the file for what is not
    usable: nothing is run."""
    from services.grading.scenario_loader import validate_paths
    from services.harness.play import users_for
    from services.harness.target import InvalidTarget, load_target
    from services.kafka.reach import require_broker

    loaded = validate_paths([scenarios])
    if loaded.errors:
        for error in loaded.errors:
            say(str(error), "red")
        raise UsageError(f"{len(loaded.errors)} problem(s) in {scenarios}: nothing was run")
    for warning in loaded.warnings:
        say(f"warning: {warning}", "yellow")
    without_user = [s.id for s in loaded.scenarios if s.user is None]
    if without_user:
        raise UsageError(
            f"{scenarios}: scenario(s) without a `user:` section, so no "
            f"user to play: {', '.join(without_user)}; nothing was run"
        )
    if not loaded.scenarios:
        raise UsageError(f"no scenario in {scenarios}")
    check_budget(loaded.scenarios, adaptive)
    try:
        chosen = load_target(target, os.environ)
    except InvalidTarget as exc:
        raise UsageError(
            f"invalid target file {exc.file}: field {exc.field}: {exc.problem}"
        ) from None
    require_broker(wait, settings)
    # Kafka errors escape to services.cli: one line, exit 4.
    if publish_first:
        for scenario_id, status in publish(loaded.scenarios, settings):
            if status != "unchanged":
                say(f"published {scenario_id} ({status})", None)
    else:
        _refuse_unpinned(loaded.scenarios, loaded.sources, settings, say)
    users, stand_in = users_for(loaded.scenarios, settings, user_model)
    if stand_in:
        say(stand_in, "yellow")
    return Prepared(list(loaded.scenarios), chosen, target, users)


def _refuse_unpinned(
    scenarios: Sequence[Scenario], sources: dict[str, str], settings: Settings, say: Say
) -> None:
    from services.harness.play import unpinned
    from services.kafka.catalog import load_catalog

    stale = unpinned(scenarios, sources, load_catalog(settings))
    if stale:
        for problem in stale:
            say(str(problem), "red")
        raise UsageError(
            f"{len(stale)} scenario(s) not as published: their trials would be "
            f"graded against another version ({', '.join(p.file for p in stale)}); "
            "publish them (`passk scenarios publish`, or `passk run --publish`); "
            "nothing was run"
        )


def run_trials(
    prepared: Prepared,
    run_id: str,
    settings: Settings,
    *,
    trials: int,
    concurrency: int,
    agent_version: str | None,
    progress: TrialProgress,
) -> RunSummary:
    """Each scenario max(trials, k) times, the trials already in the log skipped."""
    from services.harness.play import play

    try:
        return play(
            prepared.scenarios,
            prepared.target,
            run_id,
            settings,
            users=prepared.users,
            trials=trials,
            concurrency=concurrency,
            agent_version=agent_version,
            on_plan=progress.planned,
            on_trial=progress.trial,
        )
    except UsageError as exc:
        raise UsageError(f"{prepared.target_file}: {exc}") from None


def run_adaptive(
    prepared: Prepared,
    run_id: str,
    settings: Settings,
    *,
    options: AdaptiveOptions,
    concurrency: int,
    agent_version: str | None,
    progress: TrialProgress,
) -> AdaptiveResult:
    """k trials each, then rounds for the scenarios still undecided, within the budget."""
    from services.harness.play import play_adaptive

    try:
        return play_adaptive(
            prepared.scenarios,
            prepared.target,
            run_id,
            settings,
            users=prepared.users,
            options=options,
            concurrency=concurrency,
            agent_version=agent_version,
            on_trial=progress.trial,
            on_round=progress.round,
        )
    except UsageError as exc:
        raise UsageError(f"{prepared.target_file}: {exc}") from None
