"""Session states the generator writes: realistic values, and states that keep (or break)
a scenario's expectations by construction.

`holds` is the generator's own reading of an expectation, kept deliberately plain: the
outcome each trial must get comes from what the generator built, never from the gate
that the pipeline tests check.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Sequence
from typing import Any

import rstr

from schemas.paths import parse_path, resolve
from schemas.scenario import Expectation, Scenario
from services.replay.generate.config import MAX_XEGER_TRIES, GenerateError


def set_path(state: dict[str, Any], path: str, value: Any) -> None:
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


def delete_path(state: dict[str, Any], path: str) -> None:
    steps = parse_path(path)
    node: Any = state
    for step in steps[:-1]:
        node = node[step]
    leaf = steps[-1]
    if isinstance(leaf, int):
        node[leaf] = None  # removing would shift later indexes
    else:
        node.pop(leaf, None)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def holds(exp: Expectation, state: dict[str, Any]) -> bool:
    """Whether a state the generator built keeps one expectation."""
    found = resolve(state, exp.path)
    if exp.operator == "present":
        filled = found.found and found.value not in (None, "", [], {})
        return filled == bool(exp.present)
    if not found.found:
        return False
    if exp.operator == "equals":
        if exp.unordered and isinstance(exp.equals, list) and isinstance(found.value, list):
            return sorted(map(_canonical, exp.equals)) == sorted(map(_canonical, found.value))
        return _canonical(found.value) == _canonical(exp.equals)
    return isinstance(found.value, str) and re.search(exp.matches or "", found.value) is not None


def failing_expectations(scenario: Scenario, state: dict[str, Any]) -> list[int]:
    return [i for i, e in enumerate(scenario.outcome) if not holds(e, state)]


_PHRASES = {
    "fault": [
        "Circulation pump seized; no flow through the primary circuit",
        "Intermittent ignition failure on the burner",
        "Leaking pressure relief valve, water under the unit",
    ],
    "summary": [
        "Replaced the circulation pump and bled the system; pressure holds at 1.5 bar",
        "Cleaned the ignition electrode and replaced the ignition lead",
        "Fitted a new relief valve and tested the system under load",
        "Found a gas leak at the boiler inlet; isolated and capped the appliance",
        "Smelled a gas escape near the meter; made safe and reported to the safety desk",
    ],
    "actions": [
        "Isolated the gas supply",
        "Ventilated the room",
        "Capped the appliance",
        "Reported to the safety desk",
    ],
    "severity": ["high", "medium", "low"],
    "reason": ["part_on_order", "customer_unavailable", "second_visit_needed"],
    "steps": [
        "Isolated power and water",
        "Drained the circuit",
        "Fitted replacement",
        "Pressure-tested for 15 minutes",
    ],
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


def leaf_name(path: str) -> str:
    names = [s for s in parse_path(path) if isinstance(s, str) and not s.isdigit()]
    return names[-1].lower() if names else "value"


def realistic_value(path: str, rng: random.Random) -> Any:
    """A plausible non-empty value for a field, guessed from its name."""
    name = leaf_name(path)
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
    name = leaf_name(path)
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
            set_path(state, exp.path, value)
    for exp, op in ops:
        if op == "matches":
            where = f"scenario {scenario.id}, {exp.path}"
            text = matching_string(exp.matches or "", rng, where=where, prose=prose_for(exp.path))
            set_path(state, exp.path, text)
    # Deepest first: a parent that gets children on the way is already present.
    wanted = [e for e, op in ops if op == "present" and e.present]
    for exp in sorted(wanted, key=lambda e: -len(parse_path(e.path))):
        if not holds(exp, state):
            set_path(state, exp.path, realistic_value(exp.path, rng))
    roots = {parse_path(e.path)[0] for e in scenario.outcome}
    if "channel" not in roots:
        state["channel"] = rng.choice(["voice", "chat"])
    failing = failing_expectations(scenario, state)
    if failing:
        specs = [scenario.outcome[i].spec() for i in failing]
        raise GenerateError(
            f"scenario {scenario.id}: cannot build a state satisfying every expectation "
            f"(they contradict each other?): {specs}"
        )
    return state
