"""Outcome expectations on a persisted session state: pure functions, one per operator.

An expectation names a dotted path into the state (`a.b[0].c` or `a.b.0.c`) and one
operator (`present`, `equals`, `matches`). Each operator is a small function registered
by name, so the check a verdict records (`state:<path> <operator>`) says exactly which
rule was applied, and a failure reason says what was expected and what was found.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas.events import CheckOutcome
from schemas.paths import Lookup, PathError, resolve
from schemas.patterns import compile_pattern
from schemas.scenario import Expectation

# Found values are quoted in reasons; a whole session state would drown the message.
MAX_SHOWN = 200
# CheckOutcome.found travels in every gate result; keep it bounded too.
MAX_FOUND_JSON = 2000


@dataclass(frozen=True)
class Judgement:
    passed: bool
    detail: str  # what was expected and what was found, without the path


Operator = Callable[[Expectation, Lookup], Judgement]
OPERATORS: dict[str, Operator] = {}


def operator(name: str) -> Callable[[Operator], Operator]:
    def register(fn: Operator) -> Operator:
        OPERATORS[name] = fn
        return fn

    return register


# ---------------------------------------------------------------- JSON equality


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value (1 == 1.0), but a boolean is never a number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) or _is_number(b):
        if not (_is_number(a) and _is_number(b)):
            return False
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return a == b
    if isinstance(a, list) or isinstance(b, list):
        return (
            isinstance(a, list)
            and isinstance(b, list)
            and len(a) == len(b)
            and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and a.keys() == b.keys()
            and all(json_equal(a[key], b[key]) for key in a)
        )
    return type(a) is type(b) and a == b


def same_items(a: list[Any], b: list[Any]) -> bool:
    """Multiset equality of two lists under json_equal; items may be unhashable.

    json_equal is an equivalence relation, so pairing each item greedily with any
    equal unused item finds a matching whenever one exists.
    """
    if len(a) != len(b):
        return False
    unused = list(b)
    for item in a:
        for i, candidate in enumerate(unused):
            if json_equal(item, candidate):
                del unused[i]
                break
        else:
            return False
    return True


# ------------------------------------------------------------------ rendering


def show(value: Any, limit: int = MAX_SHOWN) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if _is_number(value):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _bounded(value: Any) -> Any:
    """The found value as recorded in the check: whole when small, else a truncated text."""
    text = show(value, limit=MAX_FOUND_JSON + 1)
    return value if len(text) <= MAX_FOUND_JSON else text[:MAX_FOUND_JSON] + "…"


# ------------------------------------------------------------------ operators


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | dict) and len(value) == 0)


@operator("present")
def present(exp: Expectation, found: Lookup) -> Judgement:
    has_value = found.found and not _is_empty(found.value)
    shown = show(found.value) if found.found else "nothing (path not found)"
    if exp.present:
        if has_value:
            return Judgement(True, f"present: {shown}")
        return Judgement(False, f"expected present (non-empty), found {shown}")
    if not has_value:
        return Judgement(True, f"absent or empty as expected, found {shown}")
    return Judgement(False, f"expected absent (missing, null or empty), found {shown}")


@operator("equals")
def equals(exp: Expectation, found: Lookup) -> Judgement:
    order = " (in any order)" if exp.unordered else ""
    expected = f"{show(exp.equals)}{order}"
    if not found.found:
        return Judgement(False, f"path not found, expected {expected}")
    if exp.unordered and isinstance(exp.equals, list):
        if not isinstance(found.value, list):
            return Judgement(
                False,
                f"expected a list {expected}, found {_json_kind(found.value)} {show(found.value)}",
            )
        ok = same_items(exp.equals, found.value)
    else:
        ok = json_equal(exp.equals, found.value)
    if ok:
        return Judgement(True, f"equals {expected}")
    return Judgement(False, f"expected {expected}, found {show(found.value)}")


@operator("matches")
def matches(exp: Expectation, found: Lookup) -> Judgement:
    pattern = exp.matches or ""
    wanted = f"a string matching /{pattern}/"
    if not found.found:
        return Judgement(False, f"path not found, expected {wanted}")
    if not isinstance(found.value, str):
        return Judgement(
            False,
            f"expected {wanted}, found {_json_kind(found.value)}, not a string: "
            f"{show(found.value)}",
        )
    if compile_pattern(pattern).search(found.value):
        return Judgement(True, f"matches /{pattern}/")
    return Judgement(False, f"expected {wanted}, found {show(found.value)}")


# ------------------------------------------------------------------ entry point


def check_name(exp: Expectation) -> str:
    """A short, stable name for the check: `state:<path> <operator>`."""
    name = exp.operator
    if name == "present" and exp.present is False:
        name = "absent"
    return f"state:{exp.path} {name}"


def _expected(exp: Expectation) -> Any:
    if exp.operator == "present":
        return exp.present
    if exp.operator == "equals":
        return exp.equals
    return exp.matches


def check_expectation(exp: Expectation, state: dict[str, Any]) -> CheckOutcome:
    """Apply one expectation to a persisted state; never raises on odd state content."""
    name = check_name(exp)
    try:
        found = resolve(state, exp.path)
    except PathError as exc:
        return CheckOutcome(
            check=name, passed=False, reason=f"{exp.path}: {exc}", expected=_expected(exp)
        )
    judgement = OPERATORS[exp.operator](exp, found)
    return CheckOutcome(
        check=name,
        passed=judgement.passed,
        reason=f"{exp.path}: {judgement.detail}",
        expected=_expected(exp),
        found=_bounded(found.value) if found.found else None,
    )
