"""The scenario definition: the DESIGN.md example, defaults, and every refusal named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from schemas.scenario import DEFAULT_TRIALS, Expectation, JudgeSpec, Scenario

DESIGN_EXAMPLE = """
id: debrief-billable-repair
description: Technician debriefs a billable repair; no follow-up needed.
trials: 3
expected_exit: product_closed
limits: {max_turns: 30, max_duration_s: 900}
outcome:
  - {path: report.fault, present: true}
  - {path: report.parts, present: true}
  - path: billability
    equals: [{code: LAB-2H, qty: 1}, {code: PART-PUMP, qty: 1}]
    unordered: true
  - {path: follow_up, present: false}
  - {path: report.summary, matches: "(?i)replaced"}
judges:
  - id: covered_expected_topics
    assertion: "The agent asked about fault, steps taken, parts, and tests."
  - id: avoided_repetition
    assertion: "The agent did not re-ask a question already answered."
"""


def example(**changes: Any) -> dict[str, Any]:
    data = yaml.safe_load(DESIGN_EXAMPLE)
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def refusal(data: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    with pytest.raises(ValidationError) as info:
        Scenario.model_validate(data)
    return [(e["loc"], e["msg"]) for e in info.value.errors()]


def test_the_design_example_is_valid() -> None:
    scenario = Scenario.model_validate(example())
    assert scenario.id == "debrief-billable-repair"
    assert scenario.k == 3
    assert scenario.expected_exit == ["product_closed"]
    assert scenario.limits.max_turns == 30
    assert scenario.limits.max_duration_s == 900
    assert [e.operator for e in scenario.outcome] == [
        "present",
        "present",
        "equals",
        "present",
        "matches",
    ]
    assert scenario.outcome[2].unordered
    gating = [j.id for j in scenario.gating_judges]
    assert gating == ["covered_expected_topics", "avoided_repetition"]
    assert all(j.kind == "llm" for j in scenario.judges)


def test_defaults() -> None:
    scenario = Scenario.model_validate({"id": "s", "expected_exit": ["product_closed", "max"]})
    assert scenario.trials == DEFAULT_TRIALS == 3
    assert scenario.expected_exit == ["product_closed", "max"]
    assert scenario.limits.max_turns is None and scenario.limits.max_duration_s is None
    assert scenario.outcome == [] and scenario.judges == []
    assert scenario.version is None


def test_json_round_trip() -> None:
    scenario = Scenario.model_validate(example()).versioned()
    assert Scenario.model_validate_json(scenario.model_dump_json()) == scenario


BAD: list[tuple[str, dict[str, Any], tuple[Any, ...], str]] = [
    ("no id", example(id=None), ("id",), "Field required"),
    ("id with a space", example(id="has space"), ("id",), "pattern"),
    ("no expected exit", example(expected_exit=None), ("expected_exit",), "Field required"),
    ("empty expected exits", example(expected_exit=[]), ("expected_exit",), "at least 1"),
    ("zero trials", example(trials=0), ("trials",), "greater than or equal to 1"),
    ("trials as words", example(trials="three"), ("trials",), "integer"),
    ("unknown top-level field", example(retries=2), ("retries",), "Extra inputs"),
    ("zero max_turns", example(limits={"max_turns": 0}), ("limits", "max_turns"), "greater than"),
    ("unknown limit", example(limits={"max_tokens": 5}), ("limits", "max_tokens"), "Extra"),
    (
        "two operators",
        example(outcome=[{"path": "a", "present": True, "matches": "x"}]),
        ("outcome", 0),
        "exactly one of present, equals, matches (got present, matches)",
    ),
    ("no operator", example(outcome=[{"path": "a"}]), ("outcome", 0), "got none"),
    (
        "unordered without equals",
        example(outcome=[{"path": "a", "present": True, "unordered": True}]),
        ("outcome", 0),
        "unordered only applies to equals",
    ),
    (
        "bad regex",
        example(outcome=[{"path": "a", "matches": "(unclosed"}]),
        ("outcome", 0),
        "not a valid regular expression",
    ),
    ("empty path", example(outcome=[{"path": "", "present": True}]), ("outcome", 0, "path"), ""),
    ("llm judge without assertion", example(judges=[{"id": "j"}]), ("judges", 0), "assertion"),
    (
        "duplicate judge ids",
        example(judges=[{"id": "j", "assertion": "a"}, {"id": "j", "assertion": "b"}]),
        (),
        "judge ids must be unique: j",
    ),
    (
        "llm user check without assertion",
        example(user_checks=[{"id": "in_role"}]),
        ("user_checks", 0),
        "assertion",
    ),
    (
        "duplicate user check ids",
        example(user_checks=[{"id": "u", "assertion": "a"}, {"id": "u", "assertion": "b"}]),
        ("user_checks",),
        "user check ids must be unique: u",
    ),
    (
        "user check id with a space",
        example(user_checks=[{"id": "in role", "assertion": "a"}]),
        ("user_checks", 0, "id"),
        "pattern",
    ),
]


@pytest.mark.parametrize(("why", "data", "loc", "message"), BAD, ids=[b[0] for b in BAD])
def test_an_invalid_scenario_names_the_field_and_the_problem(
    why: str, data: dict[str, Any], loc: tuple[Any, ...], message: str
) -> None:
    errors = refusal(data)
    assert len(errors) == 1, errors
    found_loc, found_msg = errors[0]
    assert found_loc == loc
    assert message in found_msg


def test_equals_may_compare_with_null_and_still_counts_as_set() -> None:
    expectation = Expectation.model_validate({"path": "follow_up", "equals": None})
    assert expectation.operator == "equals"
    assert expectation.spec() == {"path": "follow_up", "equals": None}


def test_judge_arguments_other_than_the_known_ones_are_its_params() -> None:
    judge = JudgeSpec.model_validate({"id": "short", "kind": "max_turns", "limit": 12})
    assert judge.params == {"limit": 12}
    assert judge.gating


def test_non_gating_judges_are_kept_apart() -> None:
    scenario = Scenario.model_validate(
        example(
            judges=[
                {"id": "a", "assertion": "x"},
                {"id": "b", "assertion": "y", "gating": False},
            ]
        )
    )
    assert [j.id for j in scenario.gating_judges] == ["a"]


def test_version_is_a_hash_of_the_content() -> None:
    scenario = Scenario.model_validate(example())
    same = Scenario.model_validate(example())
    changed = Scenario.model_validate(example(trials=5))
    assert scenario.content_hash() == same.content_hash()
    assert scenario.content_hash() != changed.content_hash()
    assert len(scenario.content_hash()) == 16
    versioned = scenario.versioned()
    assert versioned.version == scenario.content_hash()
    # The version does not feed its own hash.
    assert versioned.content_hash() == scenario.content_hash()
    assert scenario.version is None


def test_a_single_exit_and_its_list_form_are_the_same_version() -> None:
    one = Scenario.model_validate(example(expected_exit="product_closed"))
    listed = Scenario.model_validate(example(expected_exit=["product_closed"]))
    assert one.content_hash() == listed.content_hash()


def test_alert_targets_are_optional_and_checked() -> None:
    from tests.unit.factories import scenario as build

    plain = build()
    assert plain.alert is None
    with_alert = build(alert={"min_pass_hat_k": 0.9, "min_trials": 12})
    assert (with_alert.alert.min_pass_hat_k, with_alert.alert.min_trials) == (0.9, 12)
    # targets are part of the version; a scenario without them keeps its old version
    assert with_alert.version != plain.version
    assert "alert" not in plain.model_dump(mode="json", exclude_unset=True)
    for bad in ({"min_pass_hat_k": 1.5}, {"min_trials": 0}, {"page": "me"}):
        with pytest.raises(ValidationError):
            build(alert=bad)


def test_sections_for_the_harness_keep_the_versions_of_scenarios_without_them() -> None:
    file = Path(__file__).resolve().parents[3] / "examples/scenarios/debrief-billable-repair.yaml"
    raw = yaml.safe_load(file.read_text())
    raw.pop("user", None)
    raw.pop("external_checks", None)
    # the version this file had before `user:` and `external_checks:` existed
    assert Scenario.model_validate(raw).content_hash() == "93a9630d4989edb3"
    with_user = Scenario.model_validate({**raw, "user": {"script": ["Job 4112."]}})
    assert with_user.content_hash() != "93a9630d4989edb3"


@pytest.mark.parametrize(
    "user, problem",
    [
        ({}, "a user needs a script, or a persona"),
        ({"script": []}, "at least 1 item"),
        ({"script": ["hi"], "max_turns": 0}, "greater than or equal to 1"),
        ({"script": ["hi"], "mood": "grumpy"}, "Extra inputs are not permitted"),
    ],
)
def test_a_user_section_that_cannot_be_played_is_refused(user: dict, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        Scenario.model_validate({"id": "s", "expected_exit": "product_closed", "user": user})


def test_judging_skip_when_gates_fail_is_optional_and_keeps_old_versions() -> None:
    body = {
        "id": "s",
        "expected_exit": "product_closed",
        "judges": [{"id": "j", "assertion": "holds"}],
    }
    plain = Scenario.model_validate(body)
    assert plain.skips_judges_when_gates_fail(False) is False
    assert plain.skips_judges_when_gates_fail(True) is True  # the global setting
    said = Scenario.model_validate({**body, "judging": {"skip_when_gates_fail": False}})
    assert said.skips_judges_when_gates_fail(True) is False  # the scenario wins
    assert said.content_hash() != plain.content_hash()
    # A scenario without the section keeps the version it had before the section existed.
    assert Scenario.model_validate({**body, "judging": None}).content_hash() == plain.content_hash()
    no_llm = Scenario.model_validate(
        {**body, "judges": [], "judging": {"skip_when_gates_fail": True}}
    )
    assert no_llm.skips_judges_when_gates_fail(True) is False  # nothing to skip
    with pytest.raises(ValidationError, match="skip_when_gates_fial"):
        Scenario.model_validate({**body, "judging": {"skip_when_gates_fial": True}})
