"""`passk run`'s pinning check: a scenario not published, or whose file differs from its
latest published version, is named with its file."""

from __future__ import annotations

from schemas.scenario import Scenario
from services.harness.play import unpinned


def _scenario(sid: str, expected: str = "product_closed") -> Scenario:
    return Scenario.model_validate(
        {
            "id": sid,
            "expected_exit": expected,
            "outcome": [{"path": "x", "present": True}],
            "user": {"persona": "p", "instructions": "i", "script": ["hi"]},
        }
    ).versioned()


def test_a_published_scenario_identical_to_its_file_is_pinned() -> None:
    local = _scenario("a")
    assert unpinned([local], {"a": "s/a.yaml"}, {"a": _scenario("a")}) == []


def test_an_unpublished_scenario_is_named_with_its_file() -> None:
    [problem] = unpinned([_scenario("a")], {"a": "s/a.yaml"}, {})
    assert (problem.file, problem.scenario_id) == ("s/a.yaml", "a")
    assert str(problem) == "s/a.yaml: scenario 'a' is not published"


def test_a_file_edited_since_publishing_names_both_versions() -> None:
    published, edited = _scenario("a"), _scenario("a", "handed_off")
    [problem] = unpinned(
        [edited, _scenario("b")],
        {"a": "s/a.yaml", "b": "s/b.yaml"},
        {"a": published, "b": _scenario("b")},
    )
    assert problem.file == "s/a.yaml"
    assert str(published.version) in problem.why and str(edited.version) in problem.why
