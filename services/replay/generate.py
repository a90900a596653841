"""Synthetic, production-like traffic for a set of scenarios, with the outcome each trial must get.

Pure and deterministic: the same scenarios, config and seed give the same events, byte
for byte. Each trial passes with its scenario's true pass probability; a failing trial
carries exactly one real failure mode, and delivery quirks (a session event early,
late, duplicated, or missing) are layered on independently. The expected outcome of
every trial is written next to the traffic so the pipeline can be checked against it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

import rstr
from pydantic import BaseModel

from schemas.events import ConversationFinished, Message, SessionPersisted, TrialMetrics
from schemas.scenario import Expectation, Scenario
from services.gate.expectations import check_expectation, parse_path

FAILURE_MODES: tuple[str, ...] = (
    "wrong_exit",
    "missing_field",
    "unexpected_follow_up",
    "over_turn_limit",
    "over_duration",
    "judge_failed",
)
# Delivery quirks: how the events reach the log. Only session_missing changes the outcome.
QUIRKS: tuple[str, ...] = ("session_early", "session_late", "duplicated", "session_missing")
DEFAULT_QUIRK_RATES: dict[str, float] = {
    "session_early": 0.1,
    "session_late": 0.1,
    "duplicated": 0.1,
    "session_missing": 0.05,
}
# Exits a product that never closed the conversation reports.
WRONG_EXITS: tuple[str, ...] = ("persona_exhausted", "max_turns", "error")
MAX_XEGER_TRIES = 50


def fail_marker(judge_id: str) -> str:
    """What makes the offline stand-in judge fail exactly this judge."""
    return f"[[fail:{judge_id}]]"


class GenerateError(ValueError):
    """The scenarios or the options cannot yield valid traffic; the message says why."""


# ------------------------------------------------------------------ config and results


@dataclass(frozen=True)
class GenerateConfig:
    run_id: str
    started_at: datetime  # occurred_at of the first event; pass it in to stay deterministic
    seed: int = 0
    trials: int = 0  # at least each scenario's k
    pass_prob: Mapping[str, float] = field(default_factory=dict)
    default_pass_prob: float = 0.8
    quirk_rates: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_QUIRK_RATES))
    every_mode: bool = False
    agent_version: str | None = None

    def probability(self, scenario_id: str) -> float:
        return self.pass_prob.get(scenario_id, self.default_pass_prob)

    def validate(self, scenarios: Sequence[Scenario]) -> None:
        if not self.run_id:
            raise GenerateError("run_id must not be empty")
        if self.started_at.tzinfo is None:
            raise GenerateError("started_at must be timezone-aware")
        known = {s.id for s in scenarios}
        unknown = sorted(set(self.pass_prob) - known)
        if unknown:
            raise GenerateError(f"pass probability given for unknown scenarios: {unknown}")
        for sid, p in [*self.pass_prob.items(), ("(default)", self.default_pass_prob)]:
            if not 0.0 <= p <= 1.0:
                raise GenerateError(f"pass probability for {sid} must be in [0, 1], got {p}")
        bad = sorted(set(self.quirk_rates) - set(QUIRKS))
        if bad:
            raise GenerateError(f"unknown quirks {bad}; known: {', '.join(QUIRKS)}")
        for name, rate in self.quirk_rates.items():
            if not 0.0 <= rate <= 1.0:
                raise GenerateError(f"quirk rate for {name} must be in [0, 1], got {rate}")
        ids = [s.id for s in scenarios]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise GenerateError(f"scenario ids given twice: {dupes}")


class ExpectedTrial(BaseModel):
    trial_id: str
    scenario_id: str
    session_id: str
    expected_outcome: Literal["passed", "failed"]
    failure_mode: str | None
    quirks: list[str]
    expected_failed_checks: list[str]
    detail: str = ""  # which expectation / judge / exit the failure mode targeted


class ExpectedScenario(BaseModel):
    scenario_id: str
    k: int
    n: int
    passed: int


class Expected(BaseModel):
    run_id: str
    trials: list[ExpectedTrial]
    scenarios: list[ExpectedScenario]


InputEvent = ConversationFinished | SessionPersisted


@dataclass
class Traffic:
    events: list[InputEvent]  # in file order, duplicates included
    expected: Expected

    def jsonl(self) -> str:
        return "".join(e.model_dump_json() + "\n" for e in self.events)

    def expected_json(self) -> str:
        return self.expected.model_dump_json(indent=2) + "\n"


# ------------------------------------------------------------------ state paths


def _set_path(state: dict[str, Any], path: str, value: Any) -> None:
    """Set a value at a dotted path, creating objects (and lists for [i]) on the way."""
    steps = parse_path(path)
    node: Any = state
    for step, nxt in zip(steps, [*steps[1:], None], strict=True):
        last = nxt is None
        container: Any = [] if isinstance(nxt, int) else {}
        if isinstance(step, int):
            if not isinstance(node, list):
                raise GenerateError(f"{path}: a list is needed at [{step}]")
            while len(node) <= step:
                node.append(None)
            if last:
                node[step] = value
            else:
                if node[step] is None:
                    node[step] = container
                node = node[step]
        else:
            if not isinstance(node, dict):
                raise GenerateError(f"{path}: an object is needed at {step!r}")
            if last:
                node[step] = value
            else:
                node = node.setdefault(step, container)


def _delete_path(state: dict[str, Any], path: str) -> None:
    steps = parse_path(path)
    node: Any = state
    for step in steps[:-1]:
        node = node[step]
    leaf = steps[-1]
    if isinstance(leaf, int):
        node[leaf] = None  # removing would shift later indexes
    else:
        node.pop(leaf, None)


def _failing(scenario: Scenario, state: dict[str, Any]) -> list[int]:
    return [i for i, e in enumerate(scenario.outcome) if not check_expectation(e, state).passed]


# ------------------------------------------------------------------ realistic values

_PHRASES = {
    "fault": ["Circulation pump seized; no flow through the primary circuit",
              "Intermittent ignition failure on the burner",
              "Leaking pressure relief valve, water under the unit"],
    "summary": ["Replaced the circulation pump and bled the system; pressure holds at 1.5 bar",
                "Cleaned the ignition electrode and replaced the ignition lead",
                "Fitted a new relief valve and tested the system under load",
                "Found a gas leak at the boiler inlet; isolated and capped the appliance",
                "Smelled a gas escape near the meter; made safe and reported to the safety desk"],
    "actions": ["Isolated the gas supply", "Ventilated the room", "Capped the appliance",
                "Reported to the safety desk"],
    "severity": ["high", "medium", "low"],
    "reason": ["part_on_order", "customer_unavailable", "second_visit_needed"],
    "steps": ["Isolated power and water", "Drained the circuit", "Fitted replacement",
              "Pressure-tested for 15 minutes"],
    "parts": ["PUMP-UPS2-15-50", "VALVE-PRV-3BAR", "LEAD-IGN-450"],
    "tests": ["Pressure test passed at 1.5 bar", "Flue gas analysis within range"],
    "name": ["Sam Okafor", "Priya Raman", "Jonas Weber"],
    "customer": ["Harbourside Dental Ltd", "Elm Street Bakery", "Northgate Primary School"],
    "email": ["ops@harbourside.example", "manager@elmbakery.example"],
    "phone": ["+44 20 7946 0018", "+44 161 496 0732"],
    "note": ["Customer asked for the invoice by email", "Access via the side gate"],
}
_NUMERIC = ("qty", "quantity", "count", "hours", "minutes", "total", "amount", "price", "cost")
_LISTY = ("parts", "steps", "tests", "items", "tags", "lines", "actions", "notes")


def _leaf_name(path: str) -> str:
    names = [s for s in parse_path(path) if isinstance(s, str) and not s.isdigit()]
    return names[-1].lower() if names else "value"


def realistic_value(path: str, rng: random.Random) -> Any:
    """A plausible non-empty value for a field, guessed from its name."""
    name = _leaf_name(path)
    if "follow" in name:
        return {"reason": rng.choice(_PHRASES["reason"]), "requested_by": "technician"}
    for key, choices in _PHRASES.items():
        if key in name:
            if any(k in name for k in _LISTY):
                return rng.sample(choices, k=rng.randint(1, len(choices)))
            return rng.choice(choices)
    if any(k in name for k in _NUMERIC):
        return rng.randint(1, 8)
    if name.endswith("_id") or name == "id":
        return f"{name.upper()[:3]}-{rng.randint(10000, 99999)}"
    if name.endswith("_at") or "date" in name:
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if name.startswith(("is_", "has_")):
        return True
    if any(k in name for k in _LISTY):
        return [f"{name.rstrip('s')} {i + 1}" for i in range(rng.randint(1, 3))]
    return f"{name.replace('_', ' ').capitalize()} recorded during the call"


def prose_for(path: str) -> list[str]:
    """Realistic sentences for a text field, from its name (empty when nothing fits)."""
    name = _leaf_name(path)
    return [p for key, choices in _PHRASES.items() if key in name for p in choices]


def matching_string(
    pattern: str, rng: random.Random, *, where: str, prose: Sequence[str] = ()
) -> str:
    """A string that `re.search(pattern, s)` accepts, or a clear error when none is found.

    Realistic prose is preferred when some of it matches, or with a generated match
    after it; a bare generated match is the last resort (anchored patterns).
    """
    fitting = [p for p in prose if re.search(pattern, p)]
    if fitting:
        return rng.choice(fitting)
    sentence = rng.choice(list(prose)) if prose else None
    generator = rstr.Rstr(rng)
    last = ""
    for _ in range(MAX_XEGER_TRIES):
        try:
            last = generator.xeger(pattern)
        except Exception as exc:  # rstr raises assorted errors on constructs it cannot invert
            raise GenerateError(
                f"{where}: cannot generate a string for /{pattern}/: {exc}"
            ) from exc
        if sentence and re.search(pattern, f"{sentence} ({last})"):
            return f"{sentence} ({last})"
        if re.search(pattern, last):
            return last
    raise GenerateError(
        f"{where}: no generated string matches /{pattern}/ after {MAX_XEGER_TRIES} tries "
        f"(last: {last!r}); lookarounds and backreferences are not supported by the generator"
    )


def passing_state(scenario: Scenario, rng: random.Random) -> dict[str, Any]:
    """A persisted state that satisfies every outcome expectation of the scenario."""
    try:
        return _passing_state(scenario, rng)
    except GenerateError as exc:
        if str(exc).startswith(f"scenario {scenario.id}:"):
            raise
        raise GenerateError(
            f"scenario {scenario.id}: cannot build a state satisfying every expectation: {exc}"
        ) from exc


def _passing_state(scenario: Scenario, rng: random.Random) -> dict[str, Any]:
    state: dict[str, Any] = {}
    ops = [(e, e.operator) for e in scenario.outcome]
    for exp, op in ops:
        if op == "equals":
            value = copy.deepcopy(exp.equals)
            if exp.unordered and isinstance(value, list):
                rng.shuffle(value)  # equivalent states must not fail on ordering
            _set_path(state, exp.path, value)
    for exp, op in ops:
        if op == "matches":
            where = f"scenario {scenario.id}, {exp.path}"
            text = matching_string(exp.matches or "", rng, where=where, prose=prose_for(exp.path))
            _set_path(state, exp.path, text)
    # Deepest first: a parent that gets children on the way is already present.
    wanted = [e for e, op in ops if op == "present" and e.present]
    for exp in sorted(wanted, key=lambda e: -len(parse_path(e.path))):
        if not check_expectation(exp, state).passed:
            _set_path(state, exp.path, realistic_value(exp.path, rng))
    roots = {parse_path(e.path)[0] for e in scenario.outcome}
    if "channel" not in roots:
        state["channel"] = rng.choice(["voice", "chat"])
    failing = _failing(scenario, state)
    if failing:
        specs = [scenario.outcome[i].spec() for i in failing]
        raise GenerateError(
            f"scenario {scenario.id}: cannot build a state satisfying every expectation "
            f"(they contradict each other?): {specs}"
        )
    return state


# ------------------------------------------------------------------ failure modes

Target = str | int  # an expectation index, a judge id or an exit


def _violates_only(scenario: Scenario, state: dict[str, Any], index: int) -> bool:
    return _failing(scenario, state) == [index]


def _mutate_state(
    scenario: Scenario, state: dict[str, Any], mode: str, index: int, rng: random.Random
) -> dict[str, Any]:
    exp = scenario.outcome[index]
    broken = copy.deepcopy(state)
    if mode == "missing_field":
        _delete_path(broken, exp.path)
    else:  # unexpected_follow_up: a path that must stay empty gets a value
        _set_path(broken, exp.path, realistic_value(exp.path, rng) or "follow-up requested")
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
            broken = _mutate_state(scenario, probe, mode, i, random.Random(0))
        except (GenerateError, KeyError, IndexError, TypeError):
            continue
        if _violates_only(scenario, broken, i):
            out.append(i)
    return out


def applicable_modes(scenario: Scenario, probe: dict[str, Any]) -> dict[str, list[Target]]:
    """Each failure mode this scenario can show, with what it can target."""
    modes: dict[str, list[Target]] = {}
    exits = [x for x in WRONG_EXITS if x not in scenario.expected_exit]
    if exits:
        modes["wrong_exit"] = list(exits)
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
    elif mode in ("missing_field", "unexpected_follow_up"):
        checks.add("gate:state")
    elif mode == "judge_failed":
        checks.add(f"judge:{target}")
    if "session_missing" in quirks:
        checks.add("gate:state")
    return sorted(checks)


# ------------------------------------------------------------------ planning


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
            pool = [p for p in everyone if not p.quirks & timing]
            chosen = pool[0] if pool else add_trial(scenarios[0])
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
            plan.duplicated_event = "conversation" if "session_missing" in plan.quirks else twin
    return ordered


# ------------------------------------------------------------------ transcripts

SYSTEM_PROMPT = "You are the debrief assistant. Collect every required detail, then close."
_OPENERS = [
    "Hi, I'm calling to debrief the job I just finished.",
    "Hello, I need to log the visit from this morning.",
    "Hi there, I'm done on site and want to close this out.",
]
_ACKS = ["Got it, thanks.", "Understood.", "Thanks, noted.", "Okay, that's clear."]
_USER_FILLERS = [
    "That's right.",
    "No, nothing else on that one.",
    "Yes, the customer signed off before I left.",
    "I think that covers it.",
]


def _field_label(path: str) -> str:
    return _leaf_name(path).replace("_", " ")


def _facts(state: dict[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(k, v)
        elif value not in (None, "", [], {}):
            out.append((prefix, value))

    walk("value", state)
    return out


def _spoken(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k.replace('_', ' ')} {_spoken(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_spoken(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _user_says(label: str, value: Any) -> str:
    return f"For the {label.replace('_', ' ')}: {_spoken(value)}."


def build_transcript(
    scenario: Scenario,
    state: dict[str, Any],
    rng: random.Random,
    *,
    turns: int,
    closed: bool,
    marker: str | None,
    call_id: str,
) -> list[Message]:
    """System prompt, then `turns` user/assistant messages; tool plumbing never counts."""
    recorded = [_field_label(e.path) for e in scenario.outcome if e.operator != "present"
                or e.present]
    with_tool = turns >= 3 and rng.random() < 0.4
    closing_turns = 2 if with_tool else 1
    body_turns = max(turns - closing_turns, 0)
    # Alternate so the body ends on a user message, right before the assistant closes.
    roles: list[Literal["user", "assistant"]] = [
        "user" if (body_turns - 1 - i) % 2 == 0 else "assistant" for i in range(body_turns)
    ]
    facts = _facts(state)
    rng.shuffle(facts)
    messages = [
        Message(role="system", content=f"{SYSTEM_PROMPT} {scenario.description}".strip()),
    ]
    asks = [f"Could you tell me the {lbl}?" for lbl in recorded] or ["What else should I note?"]
    fact_i = ask_i = 0
    for i, role in enumerate(roles):
        if role == "user":
            if i == 0:
                text = rng.choice(_OPENERS)
            elif facts and fact_i < len(facts):
                text = _user_says(*facts[fact_i])
                fact_i += 1
            else:
                text = rng.choice(_USER_FILLERS)
        elif i == 0:
            text = "Hi, this is the debrief assistant. Which job are we closing today?"
        else:
            text = f"{rng.choice(_ACKS)} {asks[ask_i % len(asks)]}"
            ask_i += 1
        messages.append(Message(role=role, content=text))
    if with_tool:
        messages.append(
            Message(
                role="assistant",
                content=None,
                tool_calls=[
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "save_debrief",
                            "arguments": json.dumps({"fields": recorded}),
                        },
                    }
                ],
            )
        )
        messages.append(
            Message(role="tool", tool_call_id=call_id, name="save_debrief",
                    content=json.dumps({"ok": True}))
        )
    if closed:
        listed = ", ".join(recorded) if recorded else "everything"
        closing = f"Thanks, that's everything. I've recorded the {listed}. Closing the session now."
    else:
        closing = "Sorry, could you go over the last part again?"
    messages.append(Message(role="assistant", content=closing))
    if marker:
        spoken = [m for m in messages if m.role == "assistant" and m.content]
        chosen = rng.choice(spoken)
        chosen.content = f"{chosen.content} {marker}"
    return messages


def count_turns(transcript: Sequence[Message]) -> int:
    return sum(1 for m in transcript if m.role in ("user", "assistant"))


# ------------------------------------------------------------------ one trial


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()


def _ids(config: GenerateConfig, plan: TrialPlan) -> tuple[str, str]:
    trial_id = f"{config.run_id}:{plan.scenario.id}:{plan.index:03d}"
    session_id = "sess-" + _digest(config.run_id, plan.scenario.id, plan.index, config.seed)[:20]
    return trial_id, session_id


def build_trial(
    plan: TrialPlan, config: GenerateConfig, rng: random.Random, finished_at: datetime
) -> tuple[ConversationFinished, SessionPersisted, ExpectedTrial]:
    scenario = plan.scenario
    mode, target = plan.failure_mode, plan.target
    trial_id, session_id = _ids(config, plan)
    state = passing_state(scenario, rng)
    if mode in ("missing_field", "unexpected_follow_up"):
        assert isinstance(target, int)
        state = _mutate_state(scenario, state, mode, target, rng)
        assert _violates_only(scenario, state, target), (scenario.id, mode, target)

    limits = scenario.limits
    upper = min(limits.max_turns or 14, 14)
    turns = rng.randint(min(4, upper), upper)
    if mode == "over_turn_limit":
        assert limits.max_turns is not None
        turns = limits.max_turns + rng.randint(1, 4)
    exit_reason = str(target) if mode == "wrong_exit" else rng.choice(scenario.expected_exit)
    marker = fail_marker(str(target)) if mode == "judge_failed" else None
    transcript = build_transcript(
        scenario,
        state,
        rng,
        turns=turns,
        closed=mode != "wrong_exit",
        marker=marker,
        call_id="call_" + _digest(session_id, "tool")[:12],
    )

    if limits.max_duration_s is not None:
        duration_ms = rng.uniform(0.2, 0.9) * limits.max_duration_s * 1000
        if mode == "over_duration":
            duration_ms = limits.max_duration_s * 1000 + rng.uniform(5_000, 120_000)
    else:
        duration_ms = rng.uniform(20_000, 600_000)
    n_turns = count_turns(transcript)
    assistant_turns = sum(1 for m in transcript if m.role == "assistant")
    metrics = TrialMetrics(
        input_tokens=rng.randint(150, 400) * n_turns,
        output_tokens=rng.randint(20, 90) * assistant_turns,
        turns=n_turns,
        duration_ms=round(duration_ms),
        latency_ms=round(rng.uniform(300, 2500), 1),
    )
    conversation = ConversationFinished(
        event_id="cf-" + _digest(session_id, "conversation_finished")[:24],
        occurred_at=finished_at,
        run_id=config.run_id,
        scenario_id=scenario.id,
        trial_id=trial_id,
        session_id=session_id,
        agent_version=config.agent_version,
        exit_reason=exit_reason,
        transcript=transcript,
        metrics=metrics,
    )
    if "session_early" in plan.quirks:
        persisted_at = finished_at - timedelta(seconds=rng.uniform(0.5, 3.0))
    elif "session_late" in plan.quirks:
        persisted_at = finished_at + timedelta(seconds=rng.uniform(20.0, 90.0))
    else:
        persisted_at = finished_at + timedelta(seconds=rng.uniform(0.2, 3.0))
    session = SessionPersisted(
        event_id="sp-" + _digest(session_id, "session_persisted")[:24],
        occurred_at=persisted_at,
        session_id=session_id,
        state=state,
        trial_id=trial_id,
        run_id=config.run_id,
        scenario_id=scenario.id,
    )
    checks = failed_checks(mode, target, plan.quirks)
    detail = ""
    if mode in ("missing_field", "unexpected_follow_up"):
        detail = f"state:{scenario.outcome[int(target or 0)].path}"
    elif mode is not None:
        detail = f"{mode}:{target}"
    expected = ExpectedTrial(
        trial_id=trial_id,
        scenario_id=scenario.id,
        session_id=session_id,
        expected_outcome="failed" if checks else "passed",
        failure_mode=mode,
        quirks=sorted(plan.quirks),
        expected_failed_checks=checks,
        detail=detail,
    )
    return conversation, session, expected


# ------------------------------------------------------------------ the whole run


def generate(scenarios: Sequence[Scenario], config: GenerateConfig) -> Traffic:
    """Traffic for every scenario, in file order, and the outcome each trial must get."""
    if not scenarios:
        raise GenerateError("no scenarios to generate traffic for")
    config.validate(scenarios)
    rng = random.Random(config.seed)
    modes = {
        s.id: applicable_modes(s, passing_state(s, random.Random(_digest(config.seed, s.id))))
        for s in scenarios
    }
    plans = plan_trials(scenarios, modes, config, rng)
    order = list(range(len(plans)))
    rng.shuffle(order)  # trials of all scenarios interleave, as in production

    placed: list[tuple[float, int, InputEvent]] = []
    expected_trials: list[ExpectedTrial] = []
    clock = config.started_at
    seq = 0

    def place(position: float, event: InputEvent) -> None:
        nonlocal seq
        placed.append((position, seq, event))
        seq += 1

    for slot, i in enumerate(order):
        plan = plans[i]
        clock = clock + timedelta(seconds=rng.uniform(1.0, 4.0))
        conversation, session, expected = build_trial(plan, config, rng, clock)
        expected_trials.append(expected)
        base = slot * 10.0
        positions: dict[str, float] = {"conversation": base + 5}
        place(positions["conversation"], conversation)
        if "session_missing" not in plan.quirks:
            if "session_early" in plan.quirks:
                positions["session"] = base + 4
            elif "session_late" in plan.quirks:
                positions["session"] = base + 10.0 * rng.randint(3, 8) + 7
            else:
                positions["session"] = base + 6
            place(positions["session"], session)
        if plan.duplicated_event:
            again = conversation if plan.duplicated_event == "conversation" else session
            place(positions[plan.duplicated_event] + 10.0 * rng.randint(1, 3) + 3, again)

    placed.sort(key=lambda item: (item[0], item[1]))
    expected_trials.sort(key=lambda t: t.trial_id)
    scenario_rows = [
        ExpectedScenario(
            scenario_id=s.id,
            k=s.k,
            n=sum(1 for t in expected_trials if t.scenario_id == s.id),
            passed=sum(
                1 for t in expected_trials
                if t.scenario_id == s.id and t.expected_outcome == "passed"
            ),
        )
        for s in scenarios
    ]
    return Traffic(
        events=[event for _, _, event in placed],
        expected=Expected(run_id=config.run_id, trials=expected_trials, scenarios=scenario_rows),
    )
