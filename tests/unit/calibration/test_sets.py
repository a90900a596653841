from __future__ import annotations

import json
from pathlib import Path

from schemas.events import Message
from schemas.scenario import Scenario
from services.calibration.calibrate import excerpt, miss_kind, plan_judges
from services.calibration.export import export_sets
from services.calibration.sets import load_sets
from services.calibration.store import LabelledItemRow, now


def write(folder: Path, name: str, *lines: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    )


def test_sets_load_with_every_problem_named(tmp_path: Path) -> None:
    write(
        tmp_path,
        "j",
        {"id": "a", "label": "pass", "transcript": []},
        {"id": "b", "label": "fail", "trial_id": "t-9", "note": "from production"},
        "",
        "{not json",
        {"id": "c", "label": "maybe", "transcript": []},
        {"id": "d", "label": "pass"},
        {"id": "a", "label": "fail", "transcript": []},
    )
    sets, problems = load_sets(tmp_path)
    assert [i.id for i in sets[0].items] == ["a", "b"] and sets[0].judge_id == "j"
    assert [(p.line, p.problem.split(":")[0]) for p in problems] == [
        (4, "not JSON"),
        (5, "label"),
        (6, "(line)"),
        (7, "item id 'a' appears twice"),
    ]
    assert load_sets(tmp_path, "nobody")[1][0].problem == "no labelled set for judge 'nobody'"


def test_each_distinct_assertion_of_a_judge_id_is_its_own_version() -> None:
    def sc(sid: str, assertion: str) -> Scenario:
        return Scenario.model_validate(
            {
                "id": sid,
                "expected_exit": "x",
                "judges": [
                    {"id": "j", "assertion": assertion},
                    {"id": "r", "kind": "regex", "pattern": "x"},
                ],
            }
        )

    plan = plan_judges([sc("a", "one"), sc("b", "one"), sc("c", "two")])
    assert [j.scenario.id for j in plan.judges["j"]] == ["a", "c"]
    assert "r" not in plan.judges  # deterministic kinds are not calibrated


def test_misses_and_excerpts() -> None:
    assert [
        miss_kind(r, lbl)
        for r, lbl in [
            ("failed", "pass"),
            ("passed", "fail"),
            ("error", "pass"),
            ("failed", "fail"),
        ]
    ] == ["false positive", "false negative", "error", None]
    long = [Message(role="user", content="x" * 400), Message(role="assistant", content="END")]
    text = excerpt(long, width=120)
    assert len(text) == 120 and text.startswith("user: x") and text.endswith("END")


def test_export_appends_only_new_items_with_their_transcripts(tmp_path: Path) -> None:
    write(tmp_path, "j", {"id": "trial:t1", "label": "pass", "transcript": []})
    rows = [
        LabelledItemRow(
            judge_id="j", item_id=f"trial:{t}", trial_id=t, label="fail", labelled_at=now()
        )
        for t in ("t1", "t2", "t3")
    ]
    said = {"t2": [Message(role="user", content="hello")]}
    written = export_sets(rows, tmp_path, said.get)
    assert written == {tmp_path / "j.jsonl": 2}
    items = {i.id: i for i in load_sets(tmp_path)[0][0].items}
    assert items["trial:t2"].transcript == said["t2"]
    assert items["trial:t3"].trial_id == "t3" and items["trial:t3"].transcript is None
    assert items["trial:t1"].label == "pass"  # the human's line is left as written
    assert export_sets(rows, tmp_path, said.get) == {}


def test_per_dimension_matrices_sum_the_judges_that_name_it() -> None:
    from services.calibration.calibrate import JudgeCalibrationResult, by_dimension
    from services.grading.calibration import Bar, Matrix, calibration_event

    def result(judge: str, dim: str | None, m: Matrix) -> JudgeCalibrationResult:
        c = calibration_event(
            judge_id=judge,
            version=judge,
            matrix=m,
            bar=Bar(),
            source="set",
            assertion="a",
            prompt_hash="p",
            model="m",
            dimension=dim,
            event_id=judge,
        )
        return JudgeCalibrationResult(calibration=c, scenario_id="s", misses=[])

    dims = by_dimension(
        [
            result("a", "coverage", Matrix(tp=3, fp=1, fn=0, tn=2)),
            result("b", "coverage", Matrix(tp=2, fp=0, fn=1, tn=4, errors=1)),
            result("c", None, Matrix(tp=9)),
        ],
        Bar(),
    )
    assert dims == {"coverage": Matrix(tp=5, fp=1, fn=1, tn=6, errors=1)}
    assert dims["coverage"].precision == 5 / 6
