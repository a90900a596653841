"""What the calibration does with each record: a label or judge verdict joined by trial, a
labelled verdict or calibration folded into its judge's running matrix, outputs delivered
before the table records them. The join and the fold themselves are domain.py's."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter
from sqlalchemy.exc import SQLAlchemyError

from schemas.events import JudgeCalibration, JudgeVerdict, Label, LabelledVerdict
from services.calibration import domain
from services.calibration.metrics import CalibrationMetrics
from services.calibration.store import CalibrationStore, LabelledItemRow, now
from services.contract.codec import Rejection, decode_or_reject, encode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.grading.calibration import Bar
from services.runtime.app import Record

log = logging.getLogger(__name__)
MAX_BACKOFF_S = 30.0

Send = Callable[..., Awaitable[Awaitable[Any]]]  # (key=, value=) -> its delivery, to await
Reject = Callable[[Record, Rejection], Awaitable[None]]


async def stored(write: Callable[..., object], *args: object) -> None:
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


@dataclass(kw_only=True)
class Steps:
    """`joins` (by trial) and `matrices` (by judge) are the worker's tables: each changes
    only inside its own stream, so a repeat after a SIGKILL finds what was recorded."""

    settings: Settings
    processor: str
    joins: MutableMapping[str, Any]
    matrices: MutableMapping[str, Any]
    send_labelled: Send
    send_calibration: Send
    reject: Reject
    store: CalibrationStore
    metrics: CalibrationMetrics
    events: Counter  # passk_events_total: by processor, what it made of a record

    def __post_init__(self) -> None:
        self.bar = Bar(self.settings.calibration_bar, self.settings.min_labelled)
        self.labels_topic = topic_name(Topic.LABELS, self.settings)
        self.calibrations_topic = topic_name(Topic.JUDGE_CALIBRATIONS, self.settings)

    async def join(self, event: Record) -> None:
        is_label = event.message.topic == self.labels_topic
        model: type[Label] | type[JudgeVerdict] = Label if is_label else JudgeVerdict
        decoded = decode_or_reject(event.value, model, self.settings)
        if isinstance(decoded, Rejection):
            return await self.reject(event, decoded)
        key = decoded.trial_id
        raw = self.joins.get(key)
        state = domain.JoinState.model_validate(raw) if raw else None
        if isinstance(decoded, Label):
            state = domain.on_label(state, decoded)
        else:
            state = domain.on_verdict(state, decoded)  # type: ignore[arg-type]
        ready = domain.ready_joins(key, state)
        sent = [await self.send_labelled(key=j.judge_id.encode(), value=encode(j))
                for j in ready]
        await asyncio.gather(*sent)  # delivered before the table says they were sent
        self.joins[key] = domain.joined(state, ready).model_dump(mode="json")
        self.events.labels(self.processor, "joined" if ready else "waiting").inc()

    async def fold(self, event: Record) -> None:
        is_calibration = event.message.topic == self.calibrations_topic
        model: type[JudgeCalibration] | type[LabelledVerdict] = (
            JudgeCalibration if is_calibration else LabelledVerdict)
        decoded = decode_or_reject(event.value, model, self.settings)
        if isinstance(decoded, Rejection):
            return await self.reject(event, decoded)
        key = decoded.judge_id
        raw = self.matrices.get(key)
        state = domain.JudgeState.model_validate(raw) if raw else None
        running: JudgeCalibration | None
        if isinstance(decoded, JudgeCalibration):
            await stored(self.store.record_calibration, decoded)  # the drift history, every source
            self.metrics.show(decoded)
            state, running = domain.on_set_calibration(state, decoded, self.bar)
        else:
            item = decoded
            assert isinstance(item, LabelledVerdict)
            await stored(self.store.put_item, LabelledItemRow(
                judge_id=item.judge_id, item_id=f"trial:{item.trial_id}", trial_id=item.trial_id,
                label=item.label, note=item.note, judge_version=item.judge_version,
                judge_result=item.judge_result, judge_reason=item.judge_reason,
                labelled_at=now(),
            ))  # fmt: skip
            state, running = domain.on_labelled(state, item, self.bar)
        if running is not None:
            await (await self.send_calibration(key=key.encode(), value=encode(running)))
            self.events.labels(self.processor, "recalibrated").inc()
        self.matrices[key] = state.model_dump(mode="json")

    async def start(self) -> None:
        try:
            await asyncio.to_thread(self.store.create_schema)
        except SQLAlchemyError as exc:  # the first write will try again
            log.warning("calibration: could not create its tables yet (%s)", exc)
