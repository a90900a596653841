"""Labelled sets: one JSONL file per judge id (`<judge_id>.jsonl`), one human label a line.

A line is `{"id", "transcript": [...], "label": "pass"|"fail", "note"}`, or
`{"id", "trial_id", "label", "note"}` for a graded trial whose transcript is in the store.
The label answers "does the assertion hold for this transcript".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schemas.events import Message
from services.grading.calibration import HumanLabel


class LabelledItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    label: HumanLabel
    transcript: list[Message] | None = None
    trial_id: str | None = Field(None, min_length=1)
    note: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> LabelledItem:
        if (self.transcript is None) == (self.trial_id is None):
            raise ValueError("give exactly one of transcript or trial_id")
        return self


class SetProblem(BaseModel):
    file: str
    line: int | None
    problem: str


class LabelledSet(BaseModel):
    judge_id: str
    file: str
    items: list[LabelledItem]


def load_sets(
    directory: Path, only: str | None = None
) -> tuple[list[LabelledSet], list[SetProblem]]:
    """Every `<judge_id>.jsonl` in `directory` (or just `only`'s), with every problem found;
    a duplicated item id within a set is a problem (an item counts once)."""
    if not directory.is_dir():
        return [], [SetProblem(file=str(directory), line=None, problem="not a directory")]
    files = sorted(directory.glob("*.jsonl"))
    if only is not None:
        files = [f for f in files if f.stem == only]
        if not files:
            return [], [
                SetProblem(
                    file=str(directory / f"{only}.jsonl"),
                    line=None,
                    problem=f"no labelled set for judge {only!r}",
                )
            ]
    sets, problems = [], []
    for path in files:
        items: list[LabelledItem] = []
        seen: set[str] = set()
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not text.strip():
                continue
            try:
                data: Any = json.loads(text)
                item = LabelledItem.model_validate(data)
            except json.JSONDecodeError as exc:
                problems.append(
                    SetProblem(file=str(path), line=number, problem=f"not JSON: {exc.msg}")
                )
                continue
            except ValidationError as exc:
                detail = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or '(line)'}: {e['msg']}"
                    for e in exc.errors()[:3]
                )
                problems.append(SetProblem(file=str(path), line=number, problem=detail))
                continue
            if item.id in seen:
                problems.append(
                    SetProblem(
                        file=str(path), line=number, problem=f"item id {item.id!r} appears twice"
                    )
                )
                continue
            seen.add(item.id)
            items.append(item)
        sets.append(LabelledSet(judge_id=path.stem, file=str(path), items=items))
    return sets, problems


def item_line(item: LabelledItem) -> str:
    return json.dumps(item.model_dump(mode="json", exclude_none=True), ensure_ascii=False)
