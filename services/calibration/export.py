"""`passk calibrate --export DIR`: the labelled sets grown by production labels, as files."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from schemas.events import Message
from services.calibration.sets import LabelledItem, item_line, load_sets
from services.calibration.store import LabelledItemRow


def as_item(
    row: LabelledItemRow, transcript_of: Callable[[str], list[Message] | None]
) -> LabelledItem:
    """With the transcript when the store has it (so the file stands alone), else by trial id."""
    transcript = [Message.model_validate(m) for m in row.transcript] if row.transcript else None
    if transcript is None and row.trial_id is not None:
        transcript = transcript_of(row.trial_id)
    return LabelledItem(
        id=row.item_id,
        label=row.label,
        transcript=transcript,
        trial_id=None if transcript else row.trial_id,
        note=row.note,
    )


def export_sets(
    rows: Sequence[LabelledItemRow],
    folder: Path,
    transcript_of: Callable[[str], list[Message] | None],
) -> dict[Path, int]:
    """Append each stored item whose id the judge's file does not hold yet; an item already
    in the file is left as the human wrote it. Returns how many items each file gained."""
    folder.mkdir(parents=True, exist_ok=True)
    existing = {s.judge_id: {i.id for i in s.items} for s in load_sets(folder)[0]}
    written: dict[Path, int] = {}
    for row in rows:
        if row.item_id in existing.setdefault(row.judge_id, set()):
            continue
        path = folder / f"{row.judge_id}.jsonl"
        with path.open("a", encoding="utf-8") as out:
            out.write(item_line(as_item(row, transcript_of)) + "\n")
        existing[row.judge_id].add(row.item_id)
        written[path] = written.get(path, 0) + 1
    return written
