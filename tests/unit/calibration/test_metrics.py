from __future__ import annotations

import math

from prometheus_client import CollectorRegistry

from schemas.events import JudgeCalibration
from services.calibration.metrics import CalibrationMetrics
from tests.unit.schemas.samples import SAMPLES


def test_gauges_show_the_latest_calibration_per_judge() -> None:
    registry = CollectorRegistry()
    metrics = CalibrationMetrics(registry)
    c = JudgeCalibration.model_validate(SAMPLES[JudgeCalibration])
    metrics.show(c)
    j = {"judge": "avoided_repetition"}
    assert registry.get_sample_value("passk_judge_precision", j) == c.precision
    assert registry.get_sample_value("passk_judge_recall", j) == c.recall
    assert registry.get_sample_value("passk_judge_labelled", j) == 20
    assert registry.get_sample_value("passk_judge_gating", j) == 1
    assert registry.get_sample_value("passk_judge_precision_bar", j) == 0.8
    metrics.show(c.model_copy(update={"precision": None, "gating": False}))
    assert math.isnan(registry.get_sample_value("passk_judge_precision", j) or 0.0)
    assert registry.get_sample_value("passk_judge_gating", j) == 0
