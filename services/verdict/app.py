"""Verdict processor wiring: collect a trial's gate results and judge verdicts, emit exactly
one TrialVerdict. Logic lives in domain.py."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import faust

from schemas.events import GateResult, JudgeVerdict
from schemas.scenario import Scenario
from services.contract.codec import Rejection, decode, encode
from services.contract.processors import PROCESSORS
from services.contract.settings import get_settings
from services.contract.topics import Topic, topic_name
from services.grading.calibration import Bar, GatingPolicy
from services.kafka.calibrations import CalibrationFollower
from services.kafka.catalog import ScenarioCatalog
from services.runtime.app import (
    DeadLetters,
    make_app,
    raw_inputs,
    raw_topic,
    run_alongside,
)
from services.runtime.flow import join_flow
from services.runtime.graded import KeyedStates, graded_table
from services.runtime.metrics import common_metrics
from services.runtime.outbox import Outbox
from services.runtime.ticks import Deadlines
from services.verdict import domain
from services.verdict.metrics import VerdictMetrics

PROCESSOR = "verdict"
SPEC = PROCESSORS[PROCESSOR]  # its topics and tables
SCENARIO_GRACE_S = 3.0  # a scenario version published moments ago may not be read yet
log = logging.getLogger(__name__)
settings = get_settings()
app = make_app(PROCESSOR, settings)
timing = domain.Timing(
    judge_wait_s=settings.judge_wait_s,
    gate_wait_s=settings.session_wait_s,
    retention_s=settings.dedup_retention_s,
)

# --------------------------------------------------------------------------- topics
gate_topic = topic_name(Topic.GATE_RESULTS, settings)
judge_topic = topic_name(Topic.JUDGE_VERDICTS, settings)
tick_topic = topic_name(Topic.VERDICT_TICKS, settings)
inputs = raw_inputs(app, *SPEC.agents["collect"], settings=settings)
ticks = raw_topic(app, Topic.VERDICT_TICKS, settings)
trial_verdicts = raw_topic(app, Topic.TRIAL_VERDICTS, settings)
reject = DeadLetters(app, PROCESSOR, settings)

# --------------------------------------------------------------------------- tables
# Only trials still pending live in RAM; emitted ones are remembered on disk until the
# retention ends (services.runtime.graded), never ticked.
TRIALS, GRADED = SPEC.tables
trials = app.Table(TRIALS.name, default=None, partitions=settings.topic_partitions)
graded = graded_table(app, GRADED.name, settings)
catalog = ScenarioCatalog(settings)
deadlines = Deadlines(app, trials, ticks, settings, inputs=(gate_topic, judge_topic))
clock = deadlines.clock
run_alongside(app, settings, catalog)
calibrations = CalibrationFollower(settings)
policy = GatingPolicy(
    bar=Bar(settings.calibration_bar, settings.min_labelled),
    uncalibrated=settings.uncalibrated_judges,
)
metrics = VerdictMetrics()
common = common_metrics()


# A backlog's pending trials wait in the log, not in RAM (services.runtime.flow).
INPUT_OF = {"gate": gate_topic, "judge": judge_topic}
flow = join_flow(app, trials, (gate_topic, judge_topic), settings.join_max_pending,
                 waits_on=lambda state: INPUT_OF.get(domain.awaiting(state) or ""),
                 unread=lambda topic, p: not clock.caught_up(topic, p))
states = KeyedStates(trials, graded, deadlines.schedule,
                     marked_at=lambda state: state["emitted_at"],
                     retention_s=settings.dedup_retention_s,
                     is_marker=domain.is_marker, due_at=lambda s: domain.due_at(s, timing),
                     on_pending=flow.note)
# A batch holds each key's newest state as a model: several records of one trial in a
# batch are parsed once and dumped (and changelogged) once.
outbox = Outbox(PROCESSOR, states.read, states.store)


def _load(key: str) -> domain.TrialState | None:
    held = outbox.get(key)
    if held is None or isinstance(held, domain.TrialState):
        return held
    return domain.TrialState.model_validate(held["state"])


def _store(key: str, state: domain.TrialState | None) -> None:
    outbox.put(key, state)


def _scenario_for(state: domain.TrialState) -> Scenario | None:
    version = state.scenario_version
    if version is None and state.judges:
        version = next(iter(state.judges.values())).scenario_version
    return catalog.get(state.scenario_id, version) or catalog.get(state.scenario_id)


async def _emit(
    state: domain.TrialState, missing: list[str], waited_s: float,
    arrived_at: float | None = None,
) -> domain.TrialState | None:
    """Publish the trial's verdict; None (nothing published, state kept for the next tick)
    if its scenario is no longer in the catalog, which arrival checked it was."""
    scenario = _scenario_for(state)
    if scenario is None:
        log.error("verdict: scenario %r of trial %r left the catalog; verdict held",
                  state.scenario_id, state.trial_id)
        common.events.labels(PROCESSOR, "scenario_missing").inc()
        return None
    # Gating is decided on every calibration published before the last input arrived.
    await calibrations.sync(arrived_at)
    verdict = domain.assemble(state, scenario, missing=missing, waited_s=waited_s,
                              policy=policy, book=calibrations.book)
    # Publish before remembering it as emitted: a crash in between re-emits the same
    # event id (dropped downstream); the reverse order could lose the verdict. The Outbox
    # holds the state write back until the batch's verdicts are delivered.
    await outbox.send(trial_verdicts, state.trial_id.encode(), encode(verdict))
    metrics.count(verdict)
    if verdict.finished_at is not None and verdict.attempt == 1:  # a re-grade is not latency
        latency = (datetime.now(UTC) - verdict.finished_at).total_seconds()
        common.verdict_latency.observe(max(latency, 0.0))
    return domain.emitted(state, verdict, time.time())


@app.timer(interval=5.0)
async def known_scenarios() -> None:
    """Each scenario's trial series exist from the start, at 0 (see metrics.py)."""
    if catalog.is_ready:
        metrics.known_scenarios(catalog.latest())


# --------------------------------------------------------------------------- agents
@app.agent(inputs)
async def collect(stream: faust.StreamT) -> None:
    await catalog.ready()
    metrics.known_scenarios(catalog.latest())
    await calibrations.ready()
    await outbox.run(stream, lambda event: reject.guard(event, handle),
                     batch_max=settings.batch_max, within_s=settings.batch_within_s)


async def handle(event: faust.types.EventT) -> None:
    message = event.message
    topic = message.topic
    now = time.time()
    if topic == tick_topic:
        key = event.key.decode() if event.key else ""
        state = _load(key)
        if state is None:
            return
        # Deadlines run on how far the inputs have been read, not on the wall clock: a
        # restarted worker does not give up on judge verdicts waiting in its backlog.
        now = clock.now_for((gate_topic, judge_topic), message.partition)
        decision = domain.on_tick(state, now, timing, _scenario_for(state))
        if decision.action == "forget":
            _store(key, None)
        elif decision.action == "emit":
            done = await _emit(state, decision.missing, decision.waited_s)
            if done is not None:
                _store(key, done)
                common.events.labels(PROCESSOR, "deadline").inc()
        return

    clock.observe(topic, message.partition, message.offset, message.timestamp)
    result: GateResult | JudgeVerdict | Rejection
    if topic == gate_topic:
        result = decode(event.value, GateResult, max_bytes=settings.max_event_bytes,
                   max_depth=settings.max_json_depth)
    else:
        result = decode(event.value, JudgeVerdict, max_bytes=settings.max_event_bytes,
                   max_depth=settings.max_json_depth)
    if isinstance(result, Rejection):
        return await reject(event, result)
    if catalog.get(result.scenario_id, result.scenario_version) is None and (
            await catalog.wait_for(result.scenario_id, result.scenario_version,
                                   timeout=SCENARIO_GRACE_S) is None):
        return await reject(event, Rejection(
            "unknown_scenario",
            f"scenario {result.scenario_id!r} version {result.scenario_version!r} is unknown"))
    key = result.trial_id
    state = _load(key)
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
    missing = domain.missing_checks(state, _scenario_for(state))
    # the broker's arrival time of this input (LogAppendTime; faust gives seconds)
    emitted = await _emit(state, [], 0.0, arrived_at=message.timestamp) if not missing else None
    if emitted is not None:
        state = emitted
        common.events.labels(PROCESSOR, "emitted").inc()
    else:
        common.events.labels(PROCESSOR, "waiting").inc()
    _store(key, state)


@app.on_before_shutdown.connect  # type: ignore[arg-type]  # stub wants a signal kwarg
async def close_calibrations(sender: faust.App, **_: object) -> None:
    await calibrations.stop()


def build(settings):  # type: ignore[no-untyped-def]  # until its own build() lands
    return app
