"""`passk calibrate`'s work: every judge with a labelled set, run over it through the same
grader as production (client, prompt, cache), and its confusion matrix.

Pure where it can be (`tally`, `misses`, `by_dimension`); `run` does the grading.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from schemas.events import ConversationFinished, JudgeCalibration, Message
from schemas.scenario import JudgeSpec, Scenario
from services.calibration.sets import LabelledItem, LabelledSet, SetProblem
from services.grading.calibration import Bar, Matrix, calibration_event
from services.grading.user_checks import user_check_specs, user_view

MissKind = Literal["false positive", "false negative", "error"]


class Miss(BaseModel):
    item_id: str
    kind: MissKind
    label: str
    judge_result: str
    judge_reason: str
    excerpt: str
    note: str | None = None


class JudgeCalibrationResult(BaseModel):
    """One judge version over its set: the event published, and the misses behind it."""

    calibration: JudgeCalibration
    scenario_id: str
    misses: list[Miss]


@dataclass(frozen=True)
class JudgeUnderTest:
    spec: JudgeSpec
    scenario: Scenario
    # A user check (`user:<id>`): it reads the user's view of the transcript (the user's
    # persona and instructions, then the user's and assistant's turns), as in production.
    user_check: bool = False


@dataclass
class Plan:
    judges: dict[str, list[JudgeUnderTest]] = field(default_factory=dict)  # by judge id


def plan_judges(scenarios: Sequence[Scenario]) -> Plan:
    """Each distinct LLM judge (id and assertion) of the scenarios, and each LLM user check
    under its judge id `user:<id>` (its set: `user:<id>.jsonl`); one id with two
    assertions is two judge versions, each calibrated on the same set."""
    plan = Plan()
    for scenario in scenarios:
        specs = [(spec, False) for spec in scenario.judges]
        specs += [(spec, True) for spec in user_check_specs(scenario)]
        for spec, user_check in specs:
            if spec.kind != "llm":
                continue
            known = plan.judges.setdefault(spec.id, [])
            if all(j.spec.assertion != spec.assertion for j in known):
                known.append(JudgeUnderTest(spec, scenario, user_check))
    return plan


def excerpt(transcript: Sequence[Message], width: int = 240) -> str:
    """The conversation as `role: text`, its start and its end (where verdicts often turn)
    when it is longer than `width` characters."""
    text = " | ".join(f"{m.role}: {m.content}" for m in transcript if m.content)
    if len(text) <= width:
        return text
    head = width // 3
    return text[:head] + " … " + text[-(width - head - 3) :]


def tally(pairs: Sequence[tuple[str, str]]) -> Matrix:
    """(judge result, human label) pairs -> the confusion matrix."""
    matrix = Matrix()
    for result, label in pairs:
        matrix = matrix.add(result, label)  # type: ignore[arg-type]
    return matrix


def miss_kind(result: str, label: str) -> MissKind | None:
    if result == "error":
        return "error"
    if result == "failed" and label == "pass":
        return "false positive"
    if result == "passed" and label == "fail":
        return "false negative"
    return None


def by_dimension(results: Sequence[JudgeCalibrationResult], bar: Bar) -> dict[str, Matrix]:
    """The matrices of the judges that name a dimension, summed per dimension."""
    out: dict[str, Matrix] = {}
    for r in results:
        c = r.calibration
        if c.dimension:
            m = Matrix(tp=c.tp, fp=c.fp, fn=c.fn, tn=c.tn, errors=c.errors)
            out[c.dimension] = out.get(c.dimension, Matrix()).plus(m)
    return out


def as_trial(
    item: LabelledItem, transcript: list[Message], judge: JudgeUnderTest
) -> ConversationFinished:
    ident = f"calibration:{judge.spec.id}:{item.id}"
    trial = ConversationFinished(
        event_id=ident,
        run_id="calibration",
        scenario_id=judge.scenario.id,
        trial_id=ident,
        session_id=ident,
        exit_reason="calibration",
        transcript=transcript,
    )
    return user_view(trial, judge.scenario) if judge.user_check else trial


async def run(
    sets: Sequence[LabelledSet],
    plan: Plan,
    grader: Any,
    *,
    bar: Bar,
    prompt_hash: str,
    transcript_of: Callable[[str], list[Message] | None],
) -> tuple[list[JudgeCalibrationResult], list[SetProblem]]:
    results: list[JudgeCalibrationResult] = []
    problems: list[SetProblem] = []
    for labelled in sets:
        judges = plan.judges.get(labelled.judge_id)
        if not judges:
            problems.append(
                SetProblem(
                    file=labelled.file,
                    line=None,
                    problem=f"no LLM judge {labelled.judge_id!r} in the scenarios: not calibrated",
                )
            )
            continue
        items: list[tuple[LabelledItem, list[Message]]] = []
        for item in labelled.items:
            transcript = item.transcript
            if transcript is None and item.trial_id is not None:
                transcript = transcript_of(item.trial_id)
                if transcript is None:
                    problems.append(
                        SetProblem(
                            file=labelled.file,
                            line=None,
                            problem=f"item {item.id!r}: no transcript of trial {item.trial_id!r} "
                            "in the store; item skipped",
                        )
                    )
                    continue
            assert transcript is not None
            items.append((item, transcript))
        for judge in judges:
            verdicts = await asyncio.gather(
                *(
                    grader.grade_judges(
                        as_trial(item, transcript, judge), judge.scenario, [judge.spec]
                    )
                    for item, transcript in items
                )
            )
            pairs, misses = [], []
            for (item, transcript), (verdict,) in zip(items, verdicts, strict=True):
                pairs.append((verdict.result, item.label))
                kind = miss_kind(verdict.result, item.label)
                if kind is not None:
                    misses.append(Miss(
                        item_id=item.id, kind=kind, label=item.label,
                        judge_result=verdict.result, judge_reason=verdict.reason,
                        excerpt=excerpt(transcript), note=item.note,
                    ))  # fmt: skip
            version = grader.version_of(judge.spec)
            calibration = calibration_event(
                judge_id=judge.spec.id, version=version, matrix=tally(pairs), bar=bar,
                source="set", assertion=(judge.spec.assertion or "").strip(),
                prompt_hash=prompt_hash, model=grader.model, dimension=judge.spec.dimension,
                event_id=f"calibration:{judge.spec.id}:{version}:set:{uuid.uuid4().hex[:12]}",
            )  # fmt: skip
            results.append(
                JudgeCalibrationResult(
                    calibration=calibration, scenario_id=judge.scenario.id, misses=misses
                )
            )
    return results, problems


JSON_FIELDS = (
    "judge_id",
    "judge_version",
    "tp",
    "fp",
    "fn",
    "tn",
    "errors",
    "n",
    "precision",
    "recall",
    "gating",
    "reason",
)


def calibrate_json(results: Sequence[JudgeCalibrationResult]) -> dict[str, Any]:
    """Exactly the shape DESIGN.md promises for `passk calibrate --json`."""
    return {
        "judges": [{name: getattr(r.calibration, name) for name in JSON_FIELDS} for r in results]
    }
