"""The contract of external checks: on the conversation (ids, duplicates, a bound) and in
the scenario (ids it names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.events import MAX_EXTERNAL_CHECKS, ConversationFinished
from services.contract.codec import Rejection, decode, encode
from services.grading.scenario_loader import validate_paths
from tests.unit.factories import conversation


def with_checks(checks: list[dict]) -> bytes:
    body = json.loads(encode(conversation()))
    return json.dumps({**body, "checks": checks}).encode()


REFUSED = {
    "an id outside the pattern": ([{"id": "pii scan", "passed": True}], "checks.0.id"),
    "an id with a colon": ([{"id": "external:x", "passed": True}], "checks.0.id"),
    "an empty id": ([{"id": "", "passed": True}], "checks.0.id"),
    "an id too long": ([{"id": "x" * 129, "passed": True}], "checks.0.id"),
    "passed missing": ([{"id": "x"}], "checks.0.passed"),
    "passed not a boolean": ([{"id": "x", "passed": "yes"}], "checks.0.passed"),
    "passed as a number": ([{"id": "x", "passed": 1}], "checks.0.passed"),
    "the same id twice": (
        [{"id": "x", "passed": True}, {"id": "y", "passed": True}, {"id": "x", "passed": False}],
        "repeated: x",
    ),
    "too many checks": (
        [{"id": f"c{i}", "passed": True} for i in range(MAX_EXTERNAL_CHECKS + 1)],
        "checks",
    ),
}


@pytest.mark.parametrize(("checks", "named"), REFUSED.values(), ids=REFUSED.keys())
def test_bad_checks_refuse_the_event_naming_the_field(checks, named) -> None:
    found = decode(with_checks(checks), ConversationFinished)
    assert isinstance(found, Rejection), found
    assert found.reason in ("invalid_field", "missing_field", "wrong_type")
    assert named in found.detail


def test_good_checks_decode_and_keep_their_extra_fields() -> None:
    found = decode(
        with_checks(
            [
                {"id": "pii_scan", "passed": False, "reason": "card no.", "score": 0.2},
                {"id": "b.c-d_1", "passed": True},
            ]
        ),
        ConversationFinished,
    )
    assert isinstance(found, ConversationFinished)
    assert [(c.id, c.passed, c.reason) for c in found.checks] == [
        ("pii_scan", False, "card no."),
        ("b.c-d_1", True, ""),
    ]
    assert found.checks[0].model_extra == {"score": 0.2}


def test_no_checks_is_the_default() -> None:
    assert decode(encode(conversation()), ConversationFinished).checks == []  # type: ignore[union-attr]


SCENARIO = """\
id: s-ext
expected_exit: product_closed
external_checks: {ids}
"""


@pytest.mark.parametrize(
    ("ids", "problem"),
    [
        ('["pii scan"]', "String should match pattern"),
        ('["a", "b", "a"]', "external check ids must be unique: a"),
        ('"pii_scan"', "valid list"),
    ],
)
def test_a_scenario_naming_bad_ids_is_refused_with_file_and_field(
    tmp_path: Path, ids: str, problem: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(ids=ids))
    result = validate_paths([path])
    assert not result.scenarios
    [error] = result.errors
    assert error.file.endswith("s.yaml") and error.field.startswith("external_checks")
    assert problem in error.problem


def test_a_scenario_naming_checks_loads_and_gets_its_own_version(tmp_path: Path) -> None:
    plain = tmp_path / "a" / "s.yaml"
    named = tmp_path / "b" / "s.yaml"
    for p, ids in ((plain, "[]"), (named, "[pii_scan, tool_budget]")):
        p.parent.mkdir()
        p.write_text(SCENARIO.format(ids=ids))
    [a] = validate_paths([plain]).scenarios
    [b] = validate_paths([named]).scenarios
    assert b.external_checks == ["pii_scan", "tool_budget"]
    assert a.version != b.version
