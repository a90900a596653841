"""Verdict processor: collects a trial's gate results and judge verdicts (joined by trial_id)
and publishes exactly one TrialVerdict to trial-verdicts, gated by the judges' calibrations.
The join is services/runtime/keyed_join.py; what is done with each record, steps.py; the
decisions, domain.py."""

from __future__ import annotations

import faust
from prometheus_client import REGISTRY, CollectorRegistry

from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.kafka.calibrations import CalibrationFollower
from services.runtime.app import make_app, raw_topic, run_alongside
from services.runtime.keyed_join import KeyedJoin
from services.runtime.metrics import common_metrics
from services.verdict import domain
from services.verdict.metrics import VerdictMetrics
from services.verdict.steps import Steps

PROCESSOR = "verdict"
SPEC = PROCESSORS[PROCESSOR]  # its topics and tables


def build(settings: Settings, registry: CollectorRegistry = REGISTRY) -> faust.App:
    """(`registry`: where its own counters are registered; a second build in one
    process needs another.)"""
    app = make_app(PROCESSOR, settings)
    timing = domain.Timing.of(settings)
    # trial_id -> the trial while pending (RAM), then its emitted marker (on disk)
    join = KeyedJoin(
        app,
        SPEC,
        settings,
        state=domain.TrialState,
        roles=("gate", "judge"),
        marked_at="emitted_at",
        awaiting=domain.awaiting,
        due_at=lambda s: domain.due_at(s, timing),
        is_marker=domain.is_marker,
    )
    run_alongside(app, settings, join.catalog)
    calibrations = CalibrationFollower(settings)
    steps = Steps(
        settings,
        timing,
        join,
        calibrations=calibrations,
        trial_verdicts=raw_topic(app, Topic.TRIAL_VERDICTS, settings),
        metrics=VerdictMetrics(registry),
        common=common_metrics(),
    )
    join.agent(
        "collect",
        on_input={
            Topic.GATE_RESULTS: steps.on_gate_result,
            Topic.JUDGE_VERDICTS: steps.on_judge_verdict,
        },
        on_tick=steps.on_tick,
        before=steps.before,
    )
    app.timer(interval=5.0)(steps.known_scenarios)

    @app.on_before_shutdown.connect  # type: ignore[arg-type]  # stub wants a signal kwarg
    async def close_calibrations(sender: faust.App, **_: object) -> None:
        await calibrations.stop()

    return app
