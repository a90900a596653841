"""The path syntax of expectations: parsing and reading a state."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from schemas.paths import PathError, parse_path, resolve
from schemas.scenario import Expectation
from tests.unit.factories import EVERY_KIND_STATE

STATE = EVERY_KIND_STATE


@pytest.mark.parametrize(
    ("path", "steps"),
    [
        ("a", ["a"]),
        ("a.b.c", ["a", "b", "c"]),
        ("a.b[0].c", ["a", "b", 0, "c"]),
        ("a.b.0.c", ["a", "b", "0", "c"]),
        ("a[0][1]", ["a", 0, 1]),
        ("snake_case-key.x", ["snake_case-key", "x"]),
    ],
)
def test_parse_path(path: str, steps: list[Any]) -> None:
    assert parse_path(path) == steps


@pytest.mark.parametrize("path", ["", ".a", "a.", "a..b", "[0]", "a[x]", "a[0", "a]", "a[0]b"])
def test_parse_path_rejects_malformed(path: str) -> None:
    with pytest.raises(PathError):
        parse_path(path)


@pytest.mark.parametrize(
    ("path", "found", "value"),
    [
        ("report.fault", True, "Pump seized"),
        ("report.visits[1].tech", True, "bo"),
        ("report.visits.1.tech", True, "bo"),
        ("report.visits[2]", False, None),
        ("report.visits.2", False, None),
        ("report.0", True, "digit key"),  # a digit segment on an object is a key
        ("report.fault[0]", False, None),  # a bracket index on a string does not exist
        ("report.fault.x", False, None),
        ("report.nothing", True, None),  # present but null: found, value None
        ("missing.deeper", False, None),
        ("billability[0].code", True, "LAB-2H"),
    ],
)
def test_resolve(path: str, found: bool, value: Any) -> None:
    lookup = resolve(STATE, path)
    assert (lookup.found, lookup.value) == (found, value)


@pytest.mark.parametrize("path", ["a..b", "a[0", "[0]"])
def test_the_scenario_model_refuses_an_unreadable_path(path: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Expectation(path=path, present=True)
    assert caught.value.errors()[0]["loc"] == ("path",)
