"""The calibration processor's logic, pure: (state, event) -> (state, outputs).

Join: per trial, the latest verdict of each judge and the latest human label for it; once
both are there, one `LabelledVerdict` (re-keyed by judge id) per new label.
Fold: per judge version, the base matrix of its latest labelled-set calibration plus every
production label, one per trial (a repeated label replaces, never adds). Each change is
a new running calibration (source "labels").
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, Field

from schemas.events import JudgeCalibration, JudgeVerdict, Label, LabelledVerdict, Outcome
from services.grading.calibration import Bar, Matrix, calibration_event, matrix_of

# ------------------------------------------------------------------------- join


class SeenVerdict(BaseModel):
    result: Outcome
    reason: str
    judge_version: str | None
    run_id: str
    scenario_id: str


class SeenLabel(BaseModel):
    event_id: str
    passed: bool
    note: str | None = None


class JoinState(BaseModel):
    verdicts: dict[str, SeenVerdict] = Field(default_factory=dict)  # by judge id
    labels: dict[str, SeenLabel] = Field(default_factory=dict)  # by judge id
    sent: dict[str, str] = Field(default_factory=dict)  # judge id -> label event id joined


def on_verdict(state: JoinState | None, verdict: JudgeVerdict) -> JoinState:
    state = state or JoinState()
    if verdict.result in ("skipped", "not_sampled"):  # never asked: nothing to calibrate
        return state
    seen = SeenVerdict(
        result=verdict.result,
        reason=verdict.reason[:2000],
        judge_version=verdict.judge_version,
        run_id=verdict.run_id,
        scenario_id=verdict.scenario_id,
    )
    return state.model_copy(update={"verdicts": {**state.verdicts, verdict.judge_id: seen}})


def on_label(state: JoinState | None, label: Label) -> JoinState:
    state = state or JoinState()
    seen = SeenLabel(event_id=label.event_id, passed=label.passed, note=label.note)
    return state.model_copy(update={"labels": {**state.labels, label.judge_id: seen}})


def ready_joins(trial_id: str, state: JoinState) -> list[LabelledVerdict]:
    """Labels that have their verdict and have not been joined yet."""
    out = []
    for judge_id, label in sorted(state.labels.items()):
        verdict = state.verdicts.get(judge_id)
        if verdict is None or state.sent.get(judge_id) == label.event_id:
            continue
        out.append(LabelledVerdict(
            event_id=f"labelled:{trial_id}:{judge_id}:{label.event_id}", trial_id=trial_id,
            run_id=verdict.run_id, scenario_id=verdict.scenario_id, judge_id=judge_id,
            judge_version=verdict.judge_version, judge_result=verdict.result,
            judge_reason=verdict.reason, label="pass" if label.passed else "fail",
            note=label.note, label_event_id=label.event_id,
        ))  # fmt: skip
    return out


def joined(state: JoinState, sent: list[LabelledVerdict]) -> JoinState:
    return state.model_copy(
        update={"sent": {**state.sent, **{j.judge_id: j.label_event_id for j in sent}}}
    )


# ------------------------------------------------------------------------- fold


class VersionState(BaseModel):
    base: Matrix | None = None  # the latest labelled-set calibration of this version
    base_event_id: str | None = None
    assertion: str | None = None
    prompt_hash: str | None = None
    model: str | None = None
    dimension: str | None = None
    items: dict[str, tuple[str, str]] = Field(default_factory=dict)  # trial -> (result, label)

    def running(self) -> Matrix:
        matrix = self.base or Matrix()
        for result, label in self.items.values():
            matrix = matrix.add(result, label)  # type: ignore[arg-type]
        return matrix


class JudgeState(BaseModel):
    versions: dict[str, VersionState] = Field(default_factory=dict)


def on_set_calibration(
    state: JudgeState | None, c: JudgeCalibration, bar: Bar
) -> tuple[JudgeState, JudgeCalibration | None]:
    """A labelled-set calibration becomes the base of its version's running matrix; when
    production labels were folded in already, the running calibration that follows it."""
    state = state or JudgeState()
    if c.source != "set":
        return state, None  # our own running calibrations, read back
    if (state.versions.get(c.judge_version) or VersionState()).base_event_id == c.event_id:
        return state, None  # a repeat
    before = state.versions.get(c.judge_version) or VersionState()
    after = before.model_copy(update={
        "base": matrix_of(c), "base_event_id": c.event_id, "assertion": c.assertion,
        "prompt_hash": c.prompt_hash, "model": c.model, "dimension": c.dimension,
    })  # fmt: skip
    state = state.model_copy(update={"versions": {**state.versions, c.judge_version: after}})
    if not after.items:
        return state, None
    return state, running_calibration(c.judge_id, c.judge_version, after, bar)


def on_labelled(
    state: JudgeState | None, item: LabelledVerdict, bar: Bar
) -> tuple[JudgeState, JudgeCalibration | None]:
    """Fold one production label in; the new running calibration, or None if nothing changed
    (a repeated label, or a verdict made without a judge version: a deterministic kind)."""
    state = state or JudgeState()
    if item.judge_version is None:
        return state, None
    before = state.versions.get(item.judge_version) or VersionState()
    pair = (item.judge_result, item.label)
    if before.items.get(item.trial_id) == pair:
        return state, None
    after = before.model_copy(update={"items": {**before.items, item.trial_id: pair}})
    state = state.model_copy(update={"versions": {**state.versions, item.judge_version: after}})
    return state, running_calibration(item.judge_id, item.judge_version, after, bar)


def running_calibration(
    judge_id: str, version: str, state: VersionState, bar: Bar
) -> JudgeCalibration:
    # Deterministic id: the same base and labels make the same event, so a replay is dropped.
    body = json.dumps([state.base_event_id, sorted(state.items.items())])
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    return calibration_event(
        judge_id=judge_id,
        version=version,
        matrix=state.running(),
        bar=bar,
        source="labels",
        assertion=state.assertion,
        prompt_hash=state.prompt_hash,
        model=state.model,
        dimension=state.dimension,
        event_id=f"calibration:{judge_id}:{version}:labels:{digest}",
    )
