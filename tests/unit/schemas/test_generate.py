"""The committed JSON Schema files are exactly what the models generate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas import generate
from schemas.events import ALL_MODELS
from schemas.scenario import Scenario

ROOT = Path(__file__).resolve().parents[3]


def test_committed_schema_files_are_up_to_date() -> None:
    assert generate.stale_files() == [], "run `make schemas` and commit schemas/json"


def test_one_file_per_model_and_the_scenario() -> None:
    names = {path.name for path in generate.expected_files()}
    assert len(names) == len(ALL_MODELS) + 1
    assert "conversation_finished.schema.json" in names
    assert "scenario.schema.json" in names


@pytest.mark.parametrize("model", [*ALL_MODELS, Scenario], ids=lambda m: m.__name__)
def test_each_file_is_the_models_schema_with_an_id(model: type) -> None:
    text = generate.render(model)
    assert text.endswith("}\n")
    schema = json.loads(text)
    assert schema["$id"] == f"passk/{generate.schema_name(model)}.v1"
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["title"] == model.__name__
    required = {n for n, f in model.model_fields.items() if f.is_required()}
    assert set(schema.get("required", [])) == required
    assert generate.render(model) == text  # deterministic


def test_event_names_are_their_type() -> None:
    for model in ALL_MODELS:
        assert model.model_fields["type"].default == generate.schema_name(model)


def test_check_lists_missing_stale_and_unexpected_files(tmp_path: Path) -> None:
    generate.write(tmp_path)
    assert generate.stale_files(tmp_path) == []
    (tmp_path / "label.schema.json").unlink()
    (tmp_path / "gate_result.schema.json").write_text("{}\n")
    (tmp_path / "old_event.schema.json").write_text("{}\n")
    assert sorted(generate.stale_files(tmp_path)) == [
        "missing: label.schema.json",
        "stale: gate_result.schema.json",
        "unexpected: old_event.schema.json",
    ]


def test_check_exits_one_naming_the_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    generate.write(tmp_path)
    (tmp_path / "scenario.schema.json").write_text("{}\n")
    monkeypatch.setattr(generate, "JSON_DIR", tmp_path)
    assert generate.main(["--check"]) == 1
    assert "stale: scenario.schema.json" in capsys.readouterr().err


def test_the_scenario_schema_accepts_one_exit_or_a_list_as_the_model_does() -> None:
    schema = json.loads(generate.render(Scenario))["properties"]["expected_exit"]
    kinds = sorted(option["type"] for option in schema["anyOf"])
    assert kinds == ["array", "string"]
    assert "type" not in schema
    assert Scenario.model_validate({"id": "s", "expected_exit": "closed"}).expected_exit == [
        "closed"
    ]
