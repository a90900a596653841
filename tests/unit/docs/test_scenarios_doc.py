"""docs/scenarios.md against the models: every field of a scenario (and of each part of
one), every judge kind and its arguments, every expectation operator has its line, and
every example on the page is a valid scenario. Adding a field without documenting it
fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from schemas.scenario import (
    AlertTargets,
    Expectation,
    JudgeSpec,
    Judging,
    Limits,
    Sampling,
    Scenario,
    SimulatedUser,
)
from services.grading.kinds import LLM, known_kinds, params_of
from services.grading.scenario_loader import validate_file
from tests.support import ROOT

DOC = (ROOT / "docs" / "scenarios.md").read_text()


def section(heading: str) -> str:
    """The text under a heading, up to the next heading (of any level)."""
    found = re.search(rf"^#+ {re.escape(heading)}\s*$", DOC, re.M)
    assert found, f"docs/scenarios.md has no heading {heading!r}"
    rest = DOC[found.end() :]
    end = re.search(r"^#+ ", rest, re.M)
    return rest[: end.start()] if end else rest


def rows(text: str) -> set[str]:
    """The first cells of a section's table rows, without their backticks."""
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", text, re.M)}


PARTS: list[tuple[str, type[BaseModel], str]] = [
    ("The scenario", Scenario, ""),
    ("Limits", Limits, "limits."),
    ("Expectations", Expectation, ""),
    ("Judges", JudgeSpec, "judges[]."),
    ("Judging", Judging, "judging."),
    ("Alert targets", AlertTargets, "alert."),
    ("The simulated user", SimulatedUser, "user."),
    ("Production traffic", Sampling, "sampling."),
]


@pytest.mark.parametrize(("heading", "model", "prefix"), PARTS, ids=[p[0] for p in PARTS])
def test_every_field_has_its_line(heading: str, model: type[BaseModel], prefix: str) -> None:
    documented = rows(section(heading))
    fields = {prefix + name for name in model.model_fields}
    assert fields <= documented, f"not in docs/scenarios.md: {sorted(fields - documented)}"
    assert documented - fields <= set(), f"documented, not fields: {documented - fields}"


def test_every_model_a_scenario_holds_is_documented() -> None:
    """A new part of a scenario (a new nested model) needs a section of its own."""
    nested = {m for _, m, _ in PARTS}
    for name, info in Scenario.model_fields.items():
        for candidate in re.findall(r"\b[A-Z]\w+", str(info.annotation)):
            model = getattr(__import__("schemas.scenario", fromlist=[candidate]), candidate, None)
            if isinstance(model, type) and issubclass(model, BaseModel):
                assert model in nested, f"Scenario.{name} holds {candidate}: add a section"


@pytest.mark.parametrize("kind", known_kinds())
def test_every_judge_kind_and_its_arguments(kind: str) -> None:
    text = section(f"kind: `{kind}`")
    model = params_of(kind)
    if kind == LLM:
        assert model is None
        return
    assert model is not None, f"{kind} registers no argument model"
    assert set(model.model_fields) == rows(text)


def test_every_example_is_a_valid_scenario(tmp_path: Path) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC, re.S)
    assert len(blocks) >= 3
    for i, block in enumerate(blocks):
        path = tmp_path / f"example-{i}.yaml"
        path.write_text(block)
        scenario, result = validate_file(path)
        assert scenario is not None, (i, [str(e) for e in result.errors])
