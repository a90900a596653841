"""Labelled sets built to a known confusion matrix for the stand-in judge, whose rule is
documented: an assertion fails exactly when the transcript holds [[fail:<judge_id>]]."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from schemas.events import ConversationFinished, Message, SessionPersisted
from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.support import produce, read_topic, wait_for


def transcript(judge_id: str, flagged: bool, n: int) -> list[dict[str, Any]]:
    said = f"Replaced the pump, item {n}." + (f" [[fail:{judge_id}]]" if flagged else "")
    return [
        {"role": "assistant", "content": "What did you do on site?"},
        {"role": "user", "content": said},
        {"role": "assistant", "content": "Recorded. Goodbye."},
    ]


def items(
    judge_id: str, tp: int, fp: int, fn: int, tn: int, errors: int = 0
) -> list[dict[str, Any]]:
    """TP: flagged, human fail; FP: flagged, human pass; FN: not flagged, human fail;
    TN: neither. An error item makes the stand-in answer malformed JSON every time."""
    cells = [
        ("tp", True, "fail", tp),
        ("fp", True, "pass", fp),
        ("fn", False, "fail", fn),
        ("tn", False, "pass", tn),
    ]
    out = []
    for cell, flagged, label, count in cells:
        for i in range(count):
            out.append(
                {
                    "id": f"{cell}-{i}",
                    "transcript": transcript(judge_id, flagged, i),
                    "label": label,
                    "note": f"built as {cell}",
                }
            )
    for i in range(errors):
        t = transcript(judge_id, False, 1000 + i)
        t[1]["content"] += " [[standin:malformed]]"
        out.append({"id": f"error-{i}", "transcript": t, "label": "pass"})
    return out


def write_set(folder: Path, judge_id: str, rows: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{judge_id}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def scenario_yaml(
    folder: Path, scenario_id: str, judges: dict[str, str | None], extra: str = ""
) -> Path:
    """A scenario whose judges are the given ids, each with an optional dimension."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"id: {scenario_id}", "trials: 1", "expected_exit: product_closed", "judges:"]
    for judge_id, dimension in judges.items():
        lines.append(f"  - id: {judge_id}")
        lines.append(f'    assertion: "The agent handled {judge_id} well."')
        if dimension:
            lines.append(f"    dimension: {dimension}")
    path = folder / f"{scenario_id}.yaml"
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def send_trial(
    settings: Settings, trial_id: str, scenario_id: str, said: str, *, run_id: str
) -> None:
    """A debrief trial whose user says `said` (a `[[fail:JUDGE]]` marker makes the stand-in
    judge JUDGE fail it), and its persisted session, on the input topics."""
    conversation = ConversationFinished(
        event_id=f"cf-{trial_id}", run_id=run_id, scenario_id=scenario_id,
        trial_id=trial_id, session_id=f"s-{trial_id}", exit_reason="product_closed",
        transcript=[Message(role="assistant", content="What did you do?"),
                    Message(role="user", content=said),
                    Message(role="assistant", content="Recorded. Goodbye.")],
    )  # fmt: skip
    session = SessionPersisted(
        event_id=f"sp-{trial_id}",
        session_id=f"s-{trial_id}",
        state={"report": {"fault": "pump"}},
        trial_id=trial_id,
    )
    produce(
        settings,
        Topic.CONVERSATION_FINISHED,
        [(conversation.session_id, conversation.model_dump_json().encode())],
    )
    produce(
        settings,
        Topic.SESSION_PERSISTED,
        [(session.session_id, session.model_dump_json().encode())],
    )


def verdict_of(settings: Settings, trial_id: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        for _, value, _ in read_topic(settings, Topic.TRIAL_VERDICTS):
            if value["trial_id"] == trial_id:
                return value
        return None

    return wait_for(found, timeout=180, interval=1.0, what=f"the verdict of {trial_id}")
