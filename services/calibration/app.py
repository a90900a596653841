"""Calibration processor wiring: labels joined with their judge verdicts (by trial), folded
into each judge version's running matrix (by judge), published to judge-calibrations.v1
and kept in the store with the grown labelled set. Logic lives in domain.py.

Two agents, each on co-partitioned inputs so a table only changes inside its own stream:
`join` reads labels and judge verdicts (key: trial id) and re-keys each join by judge id
onto labelled-verdicts; `fold` reads those and the calibrations (key: judge id). Outputs
are delivered before a table records them; repeats are dropped by the tables (a label
counts once per trial and judge), so a SIGKILLed worker loses none and counts none twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import faust
from prometheus_client import REGISTRY, CollectorRegistry
from sqlalchemy.exc import SQLAlchemyError

from schemas.events import JudgeCalibration, JudgeVerdict, Label, LabelledVerdict
from services.calibration import domain
from services.calibration.metrics import CalibrationMetrics
from services.calibration.store import CalibrationStore, LabelledItemRow, now
from services.contract.codec import Rejection, decode_or_reject, encode
from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.grading.calibration import Bar
from services.runtime.app import DeadLetters, make_app, raw_inputs, raw_topic, run_alongside
from services.runtime.metrics import common_metrics

PROCESSOR = "calibration"
SPEC = PROCESSORS[PROCESSOR]  # its topics and tables
log = logging.getLogger(__name__)
MAX_BACKOFF_S = 30.0


async def _stored(write: Callable[..., object], *args: object) -> None:
    """A store that is down is waited for (the partition waits with it: nothing skipped)."""
    backoff = 0.5
    while True:
        try:
            await asyncio.to_thread(write, *args)
            return
        except SQLAlchemyError as exc:
            log.warning("calibration: store unavailable (%s); retrying in %.1fs", exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)


def build(settings: Settings, registry: CollectorRegistry = REGISTRY) -> faust.App:
    """The calibration's Faust app, its topics, tables, agents and store, from `settings`
    (`registry`: where its judge-calibration gauges are registered)."""
    app = make_app(PROCESSOR, settings)
    bar = Bar(settings.calibration_bar, settings.min_labelled)
    store = CalibrationStore(settings.database_url)
    metrics = CalibrationMetrics(registry)
    common = common_metrics()

    # ----------------------------------------------------------------------- topics
    labels_topic = topic_name(Topic.LABELS, settings)
    calibrations_topic = topic_name(Topic.JUDGE_CALIBRATIONS, settings)
    join_inputs = raw_inputs(app, *SPEC.agents["join"], settings=settings)
    fold_inputs = raw_inputs(app, *SPEC.agents["fold"], settings=settings)
    labelled = raw_topic(app, Topic.LABELLED_VERDICTS, settings)
    calibrations = raw_topic(app, Topic.JUDGE_CALIBRATIONS, settings)
    reject = DeadLetters(app, PROCESSOR, settings)

    # ----------------------------------------------------------------------- tables
    JOINS, MATRICES = SPEC.tables
    joins = app.Table(JOINS.name, default=None, partitions=settings.topic_partitions)
    matrices = app.Table(MATRICES.name, default=None, partitions=settings.topic_partitions)
    run_alongside(app, settings)

    # ----------------------------------------------------------------------- agents
    async def join(stream: faust.StreamT) -> None:
        async for event in stream.events():
            await reject.guard(event, handle_join)

    async def handle_join(event: faust.types.EventT) -> None:
        is_label = event.message.topic == labels_topic
        model: type[Label] | type[JudgeVerdict] = Label if is_label else JudgeVerdict
        decoded = decode_or_reject(event.value, model, settings)
        if isinstance(decoded, Rejection):
            return await reject(event, decoded)
        key = decoded.trial_id
        raw = joins.get(key)
        state = domain.JoinState.model_validate(raw) if raw else None
        if isinstance(decoded, Label):
            state = domain.on_label(state, decoded)
        else:
            state = domain.on_verdict(state, decoded)  # type: ignore[arg-type]
        ready = domain.ready_joins(key, state)
        sent = [await labelled.send(key=j.judge_id.encode(), value=encode(j)) for j in ready]
        await asyncio.gather(*sent)  # delivered before the table says they were sent
        joins[key] = domain.joined(state, ready).model_dump(mode="json")
        common.events.labels(PROCESSOR, "joined" if ready else "waiting").inc()

    async def fold(stream: faust.StreamT) -> None:
        async for event in stream.events():
            await reject.guard(event, handle_fold)

    async def handle_fold(event: faust.types.EventT) -> None:
        is_calibration = event.message.topic == calibrations_topic
        model: type[JudgeCalibration] | type[LabelledVerdict] = (
            JudgeCalibration if is_calibration else LabelledVerdict)
        decoded = decode_or_reject(event.value, model, settings)
        if isinstance(decoded, Rejection):
            return await reject(event, decoded)
        key = decoded.judge_id
        raw = matrices.get(key)
        state = domain.JudgeState.model_validate(raw) if raw else None
        running: JudgeCalibration | None
        if isinstance(decoded, JudgeCalibration):
            await _stored(store.record_calibration, decoded)  # the drift history, every source
            metrics.show(decoded)
            state, running = domain.on_set_calibration(state, decoded, bar)
        else:
            item = decoded
            assert isinstance(item, LabelledVerdict)
            await _stored(store.put_item, LabelledItemRow(
                judge_id=item.judge_id, item_id=f"trial:{item.trial_id}", trial_id=item.trial_id,
                label=item.label, note=item.note, judge_version=item.judge_version,
                judge_result=item.judge_result, judge_reason=item.judge_reason,
                labelled_at=now(),
            ))  # fmt: skip
            state, running = domain.on_labelled(state, item, bar)
        if running is not None:
            await (await calibrations.send(key=key.encode(), value=encode(running)))
            common.events.labels(PROCESSOR, "recalibrated").inc()
        matrices[key] = state.model_dump(mode="json")

    async def start() -> None:
        try:
            await asyncio.to_thread(store.create_schema)
        except SQLAlchemyError as exc:  # the first write will try again
            log.warning("calibration: could not create its tables yet (%s)", exc)

    app.agent(join_inputs)(join)
    app.agent(fold_inputs)(fold)
    app.task(start)
    return app
