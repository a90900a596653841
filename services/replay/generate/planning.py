"""Which trials fail and how: the failure modes a scenario can show, and the plan of every trial.

The plan is the generator's statement of what it injected; the checks each trial must
fail are read from it (`failed_checks`), never from the code under test.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from schemas.scenario import Expectation, Scenario
from services.replay.generate.config import (
    FAILURE_MODES,
    QUIRKS,
    WRONG_EXITS,
    GenerateConfig,
    GenerateError,
)
from services.replay.generate.values import (
    delete_path,
    failing_expectations,
    realistic_value,
    set_path,
)

Target = str | int  # an expectation index, a judge id or an exit


def violates_only(scenario: Scenario, state: dict[str, Any], index: int) -> bool:
    return failing_expectations(scenario, state) == [index]


def mutate_state(
    scenario: Scenario, state: dict[str, Any], mode: str, index: int, rng: random.Random
) -> dict[str, Any]:
    exp = scenario.outcome[index]
    broken = copy.deepcopy(state)
    if mode == "missing_field":
        delete_path(broken, exp.path)
    else:  # unexpected_follow_up: a path that must stay empty gets a value
        set_path(broken, exp.path, realistic_value(exp.path, rng) or "follow-up requested")
    return broken


def _state_targets(scenario: Scenario, mode: str, probe: dict[str, Any]) -> list[int]:
    def eligible(e: Expectation) -> bool:
        if mode == "missing_field":
            return (e.operator == "present" and bool(e.present)) or (
                e.operator == "equals" and e.equals is not None
            )
        return e.operator == "present" and e.present is False

    out = []
    for i, exp in enumerate(scenario.outcome):
        if not eligible(exp):
            continue
        try:
            broken = mutate_state(scenario, probe, mode, i, random.Random(0))
        except (GenerateError, KeyError, IndexError, TypeError):
            continue
        if violates_only(scenario, broken, i):
            out.append(i)
    return out


def applicable_modes(scenario: Scenario, probe: dict[str, Any]) -> dict[str, list[Target]]:
    """Each failure mode this scenario can show, with what it can target."""
    modes: dict[str, list[Target]] = {}
    exits = [x for x in WRONG_EXITS if x not in scenario.expected_exit]
    if exits:
        modes["wrong_exit"] = list(exits)
        if scenario.has_state_gate:  # only a persisted session can record the product's exit
            modes["product_exit_wrong"] = list(exits)
    for mode in ("missing_field", "unexpected_follow_up"):
        targets = _state_targets(scenario, mode, probe)
        if targets:
            modes[mode] = list(targets)
    if scenario.limits.max_turns is not None:
        modes["over_turn_limit"] = ["max_turns"]
    if scenario.limits.max_duration_s is not None:
        modes["over_duration"] = ["max_duration_s"]
    if scenario.gating_judges:
        modes["judge_failed"] = [j.id for j in scenario.gating_judges]
    return modes


def failed_checks(mode: str | None, target: Target | None, quirks: set[str]) -> list[str]:
    checks: set[str] = set()
    if mode in ("wrong_exit", "over_turn_limit", "over_duration"):
        checks.add("gate:exit")
    elif mode == "product_exit_wrong" and "session_missing" not in quirks:
        checks.add("gate:exit")  # without the session the harness's (clean) exit is checked
    elif mode in ("missing_field", "unexpected_follow_up"):
        checks.add("gate:state")
    elif mode == "judge_failed":
        checks.add(f"judge:{target}")
    if "session_missing" in quirks:
        checks.add("gate:state")
    return sorted(checks)


@dataclass
class TrialPlan:
    scenario: Scenario
    index: int  # 1-based within the scenario
    failure_mode: str | None = None
    target: Target | None = None
    quirks: set[str] = field(default_factory=set)
    duplicated_event: Literal["conversation", "session"] | None = None


def _draw_quirks(rng: random.Random, rates: Mapping[str, float], may_miss: bool) -> set[str]:
    quirks: set[str] = set()
    u = rng.random()
    early, late = rates.get("session_early", 0.0), rates.get("session_late", 0.0)
    if u < early:
        quirks.add("session_early")
    elif u < early + late:
        quirks.add("session_late")
    if rng.random() < rates.get("duplicated", 0.0):
        quirks.add("duplicated")
    # A scenario declared always-passing keeps its sessions: a missing one would fail it.
    if rng.random() < rates.get("session_missing", 0.0) and may_miss:
        quirks -= {"session_early", "session_late"}
        quirks.add("session_missing")
    return quirks


def _force_every_mode(
    plans: dict[str, list[TrialPlan]],
    scenarios: Sequence[Scenario],
    modes: Mapping[str, dict[str, list[Target]]],
    config: GenerateConfig,
) -> None:
    """Make every applicable failure mode and quirk appear at least once."""

    def add_trial(scenario: Scenario) -> TrialPlan:
        plan = TrialPlan(scenario, len(plans[scenario.id]) + 1)
        plans[scenario.id].append(plan)
        return plan

    # Forced failures go to the flakiest scenario that can show them, so the scenarios
    # meant to be reliable stay so wherever the mix allows.
    flaky = sorted(
        (s for s in scenarios if config.probability(s.id) < 1.0),
        key=lambda s: config.probability(s.id),
    )
    for mode in FAILURE_MODES:
        if any(p.failure_mode == mode for ps in plans.values() for p in ps):
            continue
        candidates = [s for s in flaky if mode in modes[s.id]]
        if not candidates:
            continue
        counts = Counter(p.failure_mode for ps in plans.values() for p in ps)
        chosen = next(
            (
                p
                for s in candidates
                for p in plans[s.id]
                if (p.failure_mode is None or counts[p.failure_mode] > 1)
                and "session_missing" not in p.quirks
            ),
            None,
        ) or add_trial(candidates[0])
        chosen.failure_mode = mode

    everyone = [p for s in scenarios for p in plans[s.id]]
    timing = {"session_early", "session_late", "session_missing"}
    # Session quirks need a session: scenarios without product-owned completion have none.
    with_session = [s for s in scenarios if s.has_state_gate]
    flaky = [s for s in flaky if s.has_state_gate]
    for quirk in QUIRKS:
        if any(quirk in p.quirks for p in everyone):
            continue
        if quirk == "duplicated":
            chosen = everyone[0]
        elif quirk == "session_missing":
            if not flaky:
                continue
            pool = [p for s in flaky for p in plans[s.id] if not p.quirks & timing]
            chosen = next((p for p in pool if p.failure_mode is None), None) or (
                pool[0] if pool else add_trial(flaky[0])
            )
        else:
            if not with_session:
                continue
            pool = [p for p in everyone if not p.quirks & timing and p.scenario.has_state_gate]
            chosen = pool[0] if pool else add_trial(with_session[0])
        chosen.quirks.add(quirk)
        everyone = [p for s in scenarios for p in plans[s.id]]


def plan_trials(
    scenarios: Sequence[Scenario],
    modes: Mapping[str, dict[str, list[Target]]],
    config: GenerateConfig,
    rng: random.Random,
) -> list[TrialPlan]:
    plans: dict[str, list[TrialPlan]] = {}
    for scenario in scenarios:
        p = config.probability(scenario.id)
        applicable = sorted(modes[scenario.id])
        plans[scenario.id] = []
        for i in range(max(scenario.k, config.trials)):
            plan = TrialPlan(scenario, i + 1)
            if rng.random() >= p and applicable:
                plan.failure_mode = rng.choice(applicable)
            plan.quirks = _draw_quirks(rng, config.quirk_rates, may_miss=p < 1.0)
            if not scenario.has_state_gate:
                plan.quirks &= {"duplicated"}  # no session is ever persisted
            plans[scenario.id].append(plan)
    if config.every_mode:
        _force_every_mode(plans, scenarios, modes, config)
    ordered = [p for s in scenarios for p in plans[s.id]]
    for plan in ordered:
        # Draw both every time, so the quirk mix never shifts which trials fail and how.
        targets = modes[plan.scenario.id].get(plan.failure_mode or "", [None])
        target = targets[rng.randrange(len(targets))]
        twin: Literal["conversation", "session"] = rng.choice(["conversation", "session"])
        if plan.failure_mode is not None:
            plan.target = target
        if "duplicated" in plan.quirks:
            no_session = "session_missing" in plan.quirks or not plan.scenario.has_state_gate
            plan.duplicated_event = "conversation" if no_session else twin
    return ordered
