"""What the calibration does with each record: a label or judge verdict joined by trial, a
labelled verdict or calibration folded into its judge's running matrix, outputs delivered
before the table records them. The join and the fold themselves are domain.py's."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import Counter
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError

from schemas.events import JudgeCalibration, JudgeVerdict, Label, LabelledVerdict
from services.calibration import domain
from services.calibration.metrics import CalibrationMetrics
from services.calibration.store import CalibrationStore, LabelledItemRow, now
from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.grading.calibration import Bar
from services.runtime.app import DeadLetters, Record

log = logging.getLogger(__name__)
MAX_BACKOFF_S = 30.0

Send = Callable[..., Awaitable[Awaitable[Any]]]  # (key=, value=) -> its delivery, to await
S = TypeVar("S", bound=BaseModel)


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


def loaded(table: MutableMapping[str, Any], key: str, model: type[S]) -> S | None:
    """A table's state for `key` as `model` (None: nothing yet)."""
    raw = table.get(key)
    return model.model_validate(raw) if raw else None


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
    reject: DeadLetters
    store: CalibrationStore
    metrics: CalibrationMetrics
    events: Counter  # passk_events_total: by processor, what it made of a record

    def __post_init__(self) -> None:
        self.bar = Bar(self.settings.calibration_bar, self.settings.min_labelled)
        self.labels_topic = topic_name(Topic.LABELS, self.settings)
        self.calibrations_topic = topic_name(Topic.JUDGE_CALIBRATIONS, self.settings)

    async def join(self, event: Record) -> None:
        is_label = event.message.topic == self.labels_topic
        model: type[Label | JudgeVerdict] = Label if is_label else JudgeVerdict
        decoded = await self.reject.decoded(event, model)
        if decoded is None:
            return
        key = decoded.trial_id
        state = loaded(self.joins, key, domain.JoinState)
        if isinstance(decoded, Label):
            state = domain.on_label(state, decoded)
        else:
            state = domain.on_verdict(state, decoded)
        ready = domain.ready_joins(key, state)
        sent = [await self.send_labelled(key=j.judge_id.encode(), value=encode(j)) for j in ready]
        await asyncio.gather(*sent)  # delivered before the table says they were sent
        self.joins[key] = domain.joined(state, ready).model_dump(mode="json")
        self.events.labels(self.processor, "joined" if ready else "waiting").inc()

    async def fold(self, event: Record) -> None:
        is_calibration = event.message.topic == self.calibrations_topic
        model: type[JudgeCalibration | LabelledVerdict] = (
            JudgeCalibration if is_calibration else LabelledVerdict
        )
        decoded = await self.reject.decoded(event, model)
        if decoded is None:
            return
        key = decoded.judge_id
        state = loaded(self.matrices, key, domain.JudgeState)
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
