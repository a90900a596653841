"""Judge calibration, pure: judge versions, confusion matrices and who may fail a trial.

Shared by `passk calibrate`, the calibration processor (running matrices from production
labels) and the verdict processor (which decides, per judge version, whether a verdict
gates). Positive class = the judge flags a failure:

    TP  judge failed, human says fail      FP  judge failed, human says pass
    FN  judge passed, human says fail      TN  both pass

precision = TP / (TP + FP), recall = TP / (TP + FN). A judge `error` on an item is
counted apart (it is neither) and leaves the calibration incomplete.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from schemas.events import JudgeCalibration, Outcome
from schemas.scenario import JudgeSpec

HumanLabel = Literal["pass", "fail"]
UncalibratedPolicy = Literal["advisory", "gating"]


def judge_version(judge_id: str, assertion: str, prompt_hash: str, model: str) -> str:
    """A judge version is (judge id, assertion, prompt template hash, model): changing any
    of them makes a new version, which starts uncalibrated."""
    body = json.dumps([judge_id, assertion.strip(), prompt_hash, model])
    return hashlib.sha256(body.encode()).hexdigest()[:16]


class Matrix(BaseModel):
    """A confusion matrix; `add` one labelled item at a time (initialize / add / result)."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    errors: int = 0

    def add(self, judge: Outcome, human: HumanLabel) -> Matrix:
        if judge == "error":
            return self.model_copy(update={"errors": self.errors + 1})
        cell = {
            ("failed", "fail"): "tp",
            ("failed", "pass"): "fp",
            ("passed", "fail"): "fn",
            ("passed", "pass"): "tn",
        }[(judge, human)]
        return self.model_copy(update={cell: getattr(self, cell) + 1})

    def plus(self, other: Matrix) -> Matrix:
        return Matrix(
            tp=self.tp + other.tp, fp=self.fp + other.fp, fn=self.fn + other.fn,
            tn=self.tn + other.tn, errors=self.errors + other.errors,
        )  # fmt: skip

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn + self.errors

    @property
    def precision(self) -> float | None:
        flagged = self.tp + self.fp
        return self.tp / flagged if flagged else None

    @property
    def recall(self) -> float | None:
        failing = self.tp + self.fn
        return self.tp / failing if failing else None


@dataclass(frozen=True)
class Bar:
    precision: float = 0.8
    min_labelled: int = 10


def decide(matrix: Matrix, bar: Bar) -> tuple[bool, str]:
    """Whether a calibration lets its judge gate, and why (the why is shown to people)."""
    precision = matrix.precision
    if matrix.errors:
        return False, f"incomplete: the judge errored on {matrix.errors} of {matrix.n} items"
    if matrix.n < bar.min_labelled:
        return False, f"too few labels: {matrix.n} < {bar.min_labelled}"
    if precision is None:
        return False, "precision unknown: the judge flagged no item of the set"
    if precision < bar.precision:
        return False, f"below the bar: precision {precision:.2f} < {bar.precision:.2f}"
    return True, f"precision {precision:.2f} >= {bar.precision:.2f} on {matrix.n} labels"


def calibration_event(
    *,
    judge_id: str,
    version: str,
    matrix: Matrix,
    bar: Bar,
    source: Literal["set", "labels"],
    assertion: str | None,
    prompt_hash: str | None,
    model: str | None,
    dimension: str | None,
    event_id: str,
) -> JudgeCalibration:
    gating, reason = decide(matrix, bar)
    return JudgeCalibration(
        event_id=event_id, judge_id=judge_id, judge_version=version, assertion=assertion,
        prompt_hash=prompt_hash, model=model, dimension=dimension, source=source,
        tp=matrix.tp, fp=matrix.fp, fn=matrix.fn, tn=matrix.tn, errors=matrix.errors,
        n=matrix.n, precision=matrix.precision, recall=matrix.recall,
        bar=bar.precision, min_labelled=bar.min_labelled, gating=gating, reason=reason,
    )  # fmt: skip


def matrix_of(calibration: JudgeCalibration) -> Matrix:
    return Matrix(
        tp=calibration.tp, fp=calibration.fp, fn=calibration.fn, tn=calibration.tn,
        errors=calibration.errors,
    )  # fmt: skip


class CalibrationBook:
    """The latest calibration of every judge version, in log order (last one wins)."""

    def __init__(self, calibrations: Iterable[JudgeCalibration] = ()) -> None:
        self._latest: dict[str, JudgeCalibration] = {}
        for c in calibrations:
            self.apply(c)

    def apply(self, calibration: JudgeCalibration) -> None:
        self._latest[calibration.judge_version] = calibration

    def get(self, version: str | None) -> JudgeCalibration | None:
        return self._latest.get(version) if version else None

    def all(self) -> Mapping[str, JudgeCalibration]:
        return dict(self._latest)


@dataclass(frozen=True)
class GatingPolicy:
    """Who may fail a trial: a judge version with a calibration that meets the bar.

    The bar is applied here, at verdict time, from the matrix itself, so a calibration
    published under another bar is judged by this pipeline's bar."""

    bar: Bar = Bar()
    uncalibrated: UncalibratedPolicy = "advisory"

    def gates(
        self, spec: JudgeSpec, version: str | None, calibration: JudgeCalibration | None
    ) -> tuple[bool, str]:
        if not spec.gating:
            return False, "gating: false in the scenario"
        if spec.kind != "llm":
            # A deterministic rule is exact, like the gates; there is no judgement to calibrate.
            return True, f"deterministic ({spec.kind})"
        if calibration is None:
            if self.uncalibrated == "gating":
                return True, "uncalibrated (PASSK_UNCALIBRATED_JUDGES=gating)"
            return False, "uncalibrated" if version else "uncalibrated (no judge version)"
        return decide(matrix_of(calibration), self.bar)
