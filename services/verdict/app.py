"""Verdict processor wiring: collect a trial's gate results and judge verdicts, emit exactly
one TrialVerdict. The join is services/runtime/keyed_join.py; the logic, domain.py."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import faust
from prometheus_client import REGISTRY, CollectorRegistry

from schemas.events import GateResult, JudgeVerdict
from schemas.scenario import Scenario
from services.contract.codec import Rejection, encode
from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.grading.calibration import Bar, GatingPolicy
from services.kafka.calibrations import CalibrationFollower
from services.runtime.app import make_app, raw_topic, run_alongside
from services.runtime.keyed_join import KeyedJoin
from services.runtime.metrics import common_metrics
from services.verdict import domain
from services.verdict.metrics import VerdictMetrics

PROCESSOR = "verdict"
SPEC = PROCESSORS[PROCESSOR]  # its topics and tables
log = logging.getLogger(__name__)


def build(settings: Settings, registry: CollectorRegistry = REGISTRY) -> faust.App:
    """(`registry`: where its own counters are registered; a second build in one
    process needs another.)"""
    app = make_app(PROCESSOR, settings)
    timing = domain.Timing(judge_wait_s=settings.judge_wait_s,
                           gate_wait_s=settings.session_wait_s,
                           retention_s=settings.dedup_retention_s)
    # trial_id -> the trial while pending (RAM), then its emitted marker (on disk)
    join = KeyedJoin(app, SPEC, settings, state=domain.TrialState, roles=("gate", "judge"),
                     marked_at="emitted_at", awaiting=domain.awaiting,
                     due_at=lambda s: domain.due_at(s, timing), is_marker=domain.is_marker)
    catalog, reject = join.catalog, join.reject
    run_alongside(app, settings, catalog)
    trial_verdicts = raw_topic(app, Topic.TRIAL_VERDICTS, settings)
    calibrations = CalibrationFollower(settings)
    policy = GatingPolicy(bar=Bar(settings.calibration_bar, settings.min_labelled),
                          uncalibrated=settings.uncalibrated_judges)
    metrics, common = VerdictMetrics(registry), common_metrics()

    def scenario_for(state: domain.TrialState) -> Scenario | None:
        version = state.scenario_version
        if version is None and state.judges:
            version = next(iter(state.judges.values())).scenario_version
        return catalog.get(state.scenario_id, version) or catalog.get(state.scenario_id)

    async def emit(state: domain.TrialState, missing: list[str], waited_s: float,
                   arrived_at: float | None = None) -> domain.TrialState | None:
        """Publish the trial's verdict; None (nothing published, state kept for the next
        tick) if its scenario is no longer in the catalog, which arrival checked it was."""
        if (scenario := scenario_for(state)) is None:
            log.error("verdict: scenario %r of trial %r left the catalog; verdict held",
                      state.scenario_id, state.trial_id)
            common.events.labels(PROCESSOR, "scenario_missing").inc()
            return None
        # Gating is decided on every calibration published before the last input arrived.
        await calibrations.sync(arrived_at)
        verdict = domain.assemble(state, scenario, missing=missing, waited_s=waited_s,
                                  policy=policy, book=calibrations.book)
        # Published before the trial is remembered as emitted (the join's Outbox): a crash
        # in between re-emits the same event id, which consumers drop.
        await join.send(trial_verdicts, state.trial_id, encode(verdict))
        metrics.count(verdict)
        if verdict.finished_at is not None and verdict.attempt == 1:  # a re-grade is not latency
            latency = (datetime.now(UTC) - verdict.finished_at).total_seconds()
            common.verdict_latency.observe(max(latency, 0.0))
        return domain.emitted(state, verdict, time.time())

    async def on_result(event: faust.types.EventT, model: type[GateResult | JudgeVerdict]) -> None:
        now = time.time()
        result = await join.decoded(event, model)
        if result is None or await join.scenario(
                event, result.scenario_id, result.scenario_version) is None:
            return
        state = join.load(result.trial_id)
        # Before the repeat check: a reused id with the first trial's attempt is no repeat.
        if conflict := domain.identity_conflict(state, result):
            return await reject(event, Rejection("trial_id_conflict", conflict))
        if domain.is_duplicate(state, result):
            metrics.duplicates.inc()
            common.events.labels(PROCESSOR, "duplicate").inc()
            return
        if isinstance(result, GateResult):
            state = domain.on_gate_result(state, result, now)
        else:
            state = domain.on_judge_verdict(state, result, now)
        # the broker's arrival time of this input (LogAppendTime; faust gives seconds)
        emitted = None if domain.missing_checks(state, scenario_for(state)) else (
            await emit(state, [], 0.0, arrived_at=event.message.timestamp))
        common.events.labels(PROCESSOR, "waiting" if emitted is None else "emitted").inc()
        join.store(result.trial_id, state if emitted is None else emitted)

    async def on_tick(event: faust.types.EventT, key: str, state: domain.TrialState,
                      now: float) -> None:
        decision = domain.on_tick(state, now, timing, scenario_for(state))
        if decision.action == "forget":
            join.store(key, None)
        elif decision.action == "emit" and (
                done := await emit(state, decision.missing, decision.waited_s)) is not None:
            join.store(key, done)
            common.events.labels(PROCESSOR, "deadline").inc()

    async def before() -> None:
        metrics.known_scenarios(catalog.latest())
        await calibrations.ready()

    join.agent("collect", on_input={Topic.GATE_RESULTS: lambda e: on_result(e, GateResult),
                                    Topic.JUDGE_VERDICTS: lambda e: on_result(e, JudgeVerdict)},
               on_tick=on_tick, before=before)

    @app.timer(interval=5.0)
    async def known_scenarios() -> None:
        """Each scenario's trial series exist from the start, at 0 (see metrics.py)."""
        if catalog.is_ready:
            metrics.known_scenarios(catalog.latest())

    @app.on_before_shutdown.connect  # type: ignore[arg-type]  # stub wants a signal kwarg
    async def close_calibrations(sender: faust.App, **_: object) -> None:
        await calibrations.stop()

    return app
