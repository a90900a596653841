"""Per judge: the running calibration's precision, recall, labels and whether it gates."""

from __future__ import annotations

from schemas.events import JudgeCalibration
from services.contract.metrics import MetricSet, gauge


class CalibrationMetrics(MetricSet):
    precision = gauge(
        "passk_judge_precision",
        "Precision of the judge's latest calibration (NaN: undefined).",
        "judge",
    )
    recall = gauge(
        "passk_judge_recall", "Recall of the judge's latest calibration (NaN: undefined).", "judge"
    )
    labelled = gauge(
        "passk_judge_labelled", "Labelled items in the judge's latest calibration.", "judge"
    )
    gating = gauge(
        "passk_judge_gating", "1 when the judge's latest calibration lets it fail trials.", "judge"
    )
    bar = gauge(
        "passk_judge_precision_bar", "The precision a judge must keep to fail trials.", "judge"
    )

    def show(self, c: JudgeCalibration) -> None:
        nan = float("nan")
        self.precision.labels(c.judge_id).set(nan if c.precision is None else c.precision)
        self.recall.labels(c.judge_id).set(nan if c.recall is None else c.recall)
        self.labelled.labels(c.judge_id).set(c.n)
        self.gating.labels(c.judge_id).set(1 if c.gating else 0)
        self.bar.labels(c.judge_id).set(c.bar)
