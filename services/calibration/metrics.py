"""Per judge: the running calibration's precision, recall, labels and whether it gates."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from schemas.events import JudgeCalibration


class CalibrationMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.precision = Gauge("passk_judge_precision",
                               "Precision of the judge's latest calibration (NaN: undefined).",
                               ["judge"], registry=registry)
        self.recall = Gauge("passk_judge_recall",
                            "Recall of the judge's latest calibration (NaN: undefined).",
                            ["judge"], registry=registry)
        self.labelled = Gauge("passk_judge_labelled",
                              "Labelled items in the judge's latest calibration.",
                              ["judge"], registry=registry)
        self.gating = Gauge("passk_judge_gating",
                            "1 when the judge's latest calibration lets it fail trials.",
                            ["judge"], registry=registry)
        self.bar = Gauge("passk_judge_precision_bar",
                         "The precision a judge must keep to fail trials.",
                         ["judge"], registry=registry)

    def show(self, c: JudgeCalibration) -> None:
        nan = float("nan")
        self.precision.labels(c.judge_id).set(nan if c.precision is None else c.precision)
        self.recall.labels(c.judge_id).set(nan if c.recall is None else c.recall)
        self.labelled.labels(c.judge_id).set(c.n)
        self.gating.labels(c.judge_id).set(1 if c.gating else 0)
        self.bar.labels(c.judge_id).set(c.bar)
