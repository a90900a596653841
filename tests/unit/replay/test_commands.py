from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.main import app

SCENARIO = """
id: warranty-no-charge
trials: 3
expected_exit: product_closed
limits: {max_turns: 10}
outcome:
  - {path: warranty.claim_id, present: true}
  - {path: follow_up, present: false}
"""


@pytest.fixture
def scenario_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    (folder / "warranty.yaml").write_text(SCENARIO)
    return folder


def run_generate(scenario_dir: Path, out: Path, *extra: str):
    return CliRunner(env={"COLUMNS": "200"}).invoke(
        app,
        [
            "generate",
            "--scenarios",
            str(scenario_dir),
            "--run-id",
            "r1",
            "--out",
            str(out / "t.jsonl"),
            "--expected",
            str(out / "e.json"),
            *extra,
        ],
    )


def test_generate_is_byte_identical_for_the_same_seed_and_start(
    scenario_dir: Path, tmp_path: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        result = run_generate(
            scenario_dir,
            folder,
            "--seed",
            "5",
            "--start",
            "2026-11-30T12:00:00Z",
            "--trials",
            "6",
            "--every-mode",
        )
        assert result.exit_code == 0, result.output
    assert (a / "t.jsonl").read_bytes() == (b / "t.jsonl").read_bytes()
    assert (a / "e.json").read_bytes() == (b / "e.json").read_bytes()
    expected = json.loads((a / "e.json").read_text())
    assert expected["scenarios"] == [
        {
            "scenario_id": "warranty-no-charge",
            "k": 3,
            "n": 6,
            "passed": sum(t["expected_outcome"] == "passed" for t in expected["trials"]),
        }
    ]
    assert "warranty-no-charge" in result.output and "seed 5" in result.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--pass-prob", "bogus"], "expected NAME=NUMBER"),
        (["--pass-prob", "nope=0.5"], "unknown scenarios"),
        (["--pass-prob", "warranty-no-charge=1.5"], "must be in [0, 1]"),
        (["--quirk-rate", "teleported=0.1"], "unknown quirks"),
        (["--start", "teatime"], "not an ISO 8601 time"),
    ],
)
def test_generate_refuses_bad_options_and_writes_nothing(
    scenario_dir: Path, tmp_path: Path, extra: list[str], message: str
) -> None:
    result = run_generate(scenario_dir, tmp_path, *extra)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "t.jsonl").exists()


def test_generate_refuses_an_invalid_scenario_file(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "broken.yaml").write_text(
        "id: x\nexpected_exit: product_closed\nlimits: {max_turns: 0}\n"
    )
    result = run_generate(folder, tmp_path)
    assert result.exit_code == 2
    assert "broken.yaml" in result.output and "no traffic written" in result.output


def test_replay_dry_run_lists_skipped_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"type": "session_persisted", "event_id": "a", "session_id": "s", "state": {}}\nnope\n'
    )
    result = CliRunner().invoke(app, ["replay", "--dry-run", str(path)])
    assert result.exit_code == 0, result.output
    assert "line 2: invalid_json" in result.output
    assert "1 invalid line(s) skipped" in result.output
