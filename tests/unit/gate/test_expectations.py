from __future__ import annotations

from typing import Any

import pytest

from schemas.scenario import Expectation
from services.gate.expectations import OPERATORS, check_expectation, json_equal, same_items
from tests.unit.factories import EVERY_KIND_STATE

STATE = EVERY_KIND_STATE


def exp(**kw: Any) -> Expectation:
    return Expectation(**kw)


def test_operators_are_registered_by_name() -> None:
    assert set(OPERATORS) == {"present", "equals", "matches"}


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1.0, True),
        (0, 0.0, True),
        (True, 1, False),
        (1, True, False),
        (False, 0, False),
        (True, True, True),
        (None, None, True),
        (None, 0, False),
        (None, "", False),
        ("1", 1, False),
        ("a", "a", True),
        ([1, 2], [1.0, 2.0], True),
        ([1, 2], [2, 1], False),  # ordered unless asked otherwise
        ([1], [1, 1], False),
        ({"a": 1, "b": [True]}, {"b": [True], "a": 1.0}, True),
        ({"a": 1}, {"a": 1, "b": None}, False),
        ({"a": [1, True]}, {"a": [1, 1]}, False),  # recursively, booleans are not numbers
        ([], {}, False),
    ],
)
def test_json_equal(a: Any, b: Any, equal: bool) -> None:
    assert json_equal(a, b) is equal
    assert json_equal(b, a) is equal


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ([1, 2, 3], [3, 1, 2], True),
        ([1, 1, 2], [1, 2, 2], False),  # a multiset, not a set
        ([1, 1, 2], [2, 1, 1], True),
        ([{"a": 1}, {"b": [1, 2]}], [{"b": [1, 2]}, {"a": 1.0}], True),  # unhashable items
        ([{"b": [1, 2]}], [{"b": [2, 1]}], False),  # nested lists stay ordered
        ([[1, 2], [3]], [[3], [1, 2]], True),
        ([[1, 2]], [[2, 1]], False),
        ([True], [1], False),
        ([], [], True),
        ([1], [], False),
    ],
)
def test_same_items(a: list[Any], b: list[Any], same: bool) -> None:
    assert same_items(a, b) is same


# (expectation, passed, fragments the reason must contain)
CASES: list[tuple[dict[str, Any], bool, list[str]]] = [
    # present: true -- exists and is not null, "", [], {}
    ({"path": "report.fault", "present": True}, True, ["report.fault"]),
    ({"path": "report.count", "present": True}, True, []),  # 0 is a value
    ({"path": "report.flag", "present": True}, True, []),  # false is a value
    (
        {"path": "report.nothing", "present": True},
        False,
        ["report.nothing: expected present (non-empty), found null"],
    ),
    ({"path": "report.notes", "present": True}, False, ['found ""']),
    ({"path": "report.tags", "present": True}, False, ["found []"]),
    ({"path": "report.extra", "present": True}, False, ["found {}"]),
    ({"path": "report.missing", "present": True}, False, ["path not found"]),
    # present: false -- absent, null or empty
    ({"path": "follow_up", "present": False}, True, []),
    ({"path": "report.nothing", "present": False}, True, []),
    ({"path": "report.notes", "present": False}, True, []),
    ({"path": "report.tags", "present": False}, True, []),
    ({"path": "report.extra", "present": False}, True, []),
    (
        {"path": "report.fault", "present": False},
        False,
        ["report.fault: expected absent", '"Pump seized"'],
    ),
    ({"path": "report.count", "present": False}, False, ["found 0"]),
    # equals
    ({"path": "report.visits[0].hours", "equals": 2.0}, True, []),
    ({"path": "report.visits.1.hours", "equals": 1.5}, True, []),
    ({"path": "report.flag", "equals": 0}, False, ["expected 0, found false"]),
    ({"path": "report.count", "equals": False}, False, ["expected false, found 0"]),
    ({"path": "report.nothing", "equals": None}, True, []),
    ({"path": "report.parts", "equals": ["PART-PUMP"]}, True, []),
    (
        {"path": "report.absent", "equals": None},
        False,
        ["report.absent: path not found"],  # missing is not null
    ),
    (
        {
            "path": "billability",
            "equals": [{"code": "PART-PUMP", "qty": 1}, {"code": "LAB-2H", "qty": 1}],
        },
        False,
        ["billability: expected", "found"],
    ),
    (
        {
            "path": "billability",
            "equals": [{"code": "PART-PUMP", "qty": 1.0}, {"code": "LAB-2H", "qty": 1}],
            "unordered": True,
        },
        True,
        ["in any order"],
    ),
    (
        {"path": "billability", "equals": [{"code": "LAB-2H", "qty": 1}], "unordered": True},
        False,
        ["in any order", "found"],
    ),
    (
        {"path": "report.fault", "equals": ["Pump seized"], "unordered": True},
        False,
        ["found a string"],
    ),
    ({"path": "report.fault", "equals": "Pump seized", "unordered": True}, True, []),
    # matches: re.search on a string
    ({"path": "report.summary", "matches": "(?i)replaced"}, True, []),
    ({"path": "report.summary", "matches": "pressure test"}, True, []),  # search, not match
    ({"path": "report.summary", "matches": "^pressure"}, False, ["/^pressure/", "found"]),
    ({"path": "report.count", "matches": "0"}, False, ["a number, not a string"]),
    ({"path": "report.nothing", "matches": "x"}, False, ["null, not a string"]),
    ({"path": "report.nope", "matches": "x"}, False, ["report.nope: path not found"]),
]


@pytest.mark.parametrize(("spec", "passed", "fragments"), CASES)
def test_check_expectation(spec: dict[str, Any], passed: bool, fragments: list[str]) -> None:
    outcome = check_expectation(exp(**spec), STATE)
    assert outcome.passed is passed, outcome.reason
    assert outcome.reason.startswith(spec["path"] + ": ")
    for fragment in fragments:
        assert fragment in outcome.reason


@pytest.mark.parametrize(
    ("spec", "check", "expected"),
    [
        ({"path": "report.fault", "present": True}, "state:report.fault present", True),
        ({"path": "follow_up", "present": False}, "state:follow_up absent", False),
        ({"path": "a.b[0]", "equals": [1]}, "state:a.b[0] equals", [1]),
        ({"path": "s", "matches": "x+"}, "state:s matches", "x+"),
    ],
)
def test_check_name_and_expected(spec: dict[str, Any], check: str, expected: Any) -> None:
    outcome = check_expectation(exp(**spec), {})
    assert outcome.check == check
    assert outcome.expected == expected


def test_found_is_recorded_and_long_values_are_truncated_in_the_reason() -> None:
    state = {"report": {"summary": "x" * 5000}}
    outcome = check_expectation(exp(path="report.summary", matches="y"), state)
    assert not outcome.passed
    assert len(outcome.reason) < 400
    assert outcome.reason.endswith("…")
    assert isinstance(outcome.found, str) and len(outcome.found) <= 2001

    small = check_expectation(exp(path="report.fault", equals="x"), STATE)
    assert small.found == "Pump seized"
    missing = check_expectation(exp(path="nope", equals="x"), STATE)
    assert missing.found is None


def test_a_malformed_path_that_bypassed_validation_fails_the_check_and_never_raises() -> None:
    # The scenario model refuses such a path; a catalog entry built without validation
    # (model_construct) must still grade, not crash the gate.
    broken = Expectation.model_construct(path="report..fault", present=True)
    broken.model_fields_set.add("present")
    outcome = check_expectation(broken, STATE)
    assert not outcome.passed and "empty segment" in outcome.reason
