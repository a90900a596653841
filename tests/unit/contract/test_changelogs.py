"""The table changelog topics `passk topics create` makes are the ones Faust will use."""

from __future__ import annotations

import pytest

from services.contract.topics import Topic, topic_name


@pytest.mark.parametrize(
    ("module", "table", "topic"),
    [
        ("services.gate.app", "joins", Topic.GATE_JOINS_CHANGELOG),
        ("services.verdict.app", "trials", Topic.VERDICT_TRIALS_CHANGELOG),
        ("services.aggregate.app", "state", Topic.AGGREGATE_STATE_CHANGELOG),
        ("services.calibration.app", "joins", Topic.CALIBRATION_JOINS_CHANGELOG),
        ("services.calibration.app", "matrices", Topic.CALIBRATION_MATRICES_CHANGELOG),
        ("services.gate.app", "graded", Topic.GATE_GRADED_CHANGELOG),
        ("services.verdict.app", "graded", Topic.VERDICT_GRADED_CHANGELOG),
    ],
)
def test_declared_changelog_is_the_tables_changelog(module: str, table: str, topic: Topic) -> None:
    import importlib

    app_module = importlib.import_module(module)
    changelog = getattr(app_module, table).changelog_topic
    assert changelog.get_topic_name() == topic_name(topic, app_module.settings)
