"""What the sink does with a batch of records: keep the storable ones, write them in one
transaction, and dead-letter the rest.

What rows an event makes lives in services/storage/records.py; how they are written, in
services/storage/store.py. Database calls run in a thread so the event loop keeps serving
the consumer, and a batch's offsets are acknowledged only once its transaction has
committed (the agent takes the next batch only after this one is written).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from functools import partial

from sqlalchemy.exc import DataError, IntegrityError, InterfaceError, OperationalError

from services.contract.codec import Rejection
from services.contract.settings import Settings
from services.contract.topics import topic_name
from services.runtime.app import INFRASTRUCTURE_ERRORS, DeadLetters, Record
from services.runtime.metrics import CommonMetrics
from services.runtime.outage import Dependency
from services.sink.domain import MODELS, storable
from services.storage.records import SinkEvent
from services.storage.store import Store

log = logging.getLogger(__name__)


class Steps:
    """The sink's handling of its batches. `database` is the store as a dependency that
    can be down: a write waits for it rather than skipping a record."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        database: Dependency,
        reject: DeadLetters,
        processor: str,
        common: CommonMetrics,
    ) -> None:
        self.settings = settings
        self.models = {topic_name(topic, settings): model for topic, model in MODELS.items()}
        self.store = store
        self.database = database
        self.reject = reject
        self.processor = processor
        self.common = common

    async def create_tables(self) -> None:
        # Create the tables before the first write, so the report works on an idle pipeline.
        try:
            await asyncio.to_thread(self.store.create_schema)
        except (OperationalError, InterfaceError) as exc:  # the first write will try again
            log.warning("sink: could not create the projection's tables yet (%s)", exc)

    async def write(self, batch: list[SinkEvent]) -> Exception | None:
        """Store a batch in one transaction. A database that is down or locked is waited
        for (the stream waits with it, so nothing is skipped; logged once per outage, every
        failed try counted); the error of a row the database refuses is returned."""
        try:
            await self.database.call(
                "write",
                lambda: asyncio.to_thread(self.store.apply_many, batch),
                retry_on=(OperationalError, InterfaceError),
            )
        except (DataError, IntegrityError) as exc:
            return exc
        return None

    def usable(self, record: Record) -> SinkEvent | Rejection:
        return storable(record.value, self.models[record.message.topic], self.settings)

    async def sink_batch(self, records: Sequence[Record]) -> None:
        good: list[tuple[Record, SinkEvent]] = []

        async def take(record: Record) -> None:
            found = self.usable(record)
            if isinstance(found, Rejection):
                await self.reject(record, found)
            else:
                good.append((record, found))

        for record in records:
            # a record no check foresaw is dead-lettered alone
            await self.reject.guard(record, take)
        if not good:
            return
        try:
            refused: Exception | None = await self.write([event for _, event in good])
        except INFRASTRUCTURE_ERRORS:
            raise
        except Exception as exc:  # one record spoils the batch: find it below, record by record
            refused = exc
        if refused is None:
            self.common.events.labels(self.processor, "stored").inc(len(good))
            return
        # One row the database refuses spoils the transaction: write the batch one by one
        # so only that row is dead-lettered (rare: the decoder has checked the fields).
        for record, event in good:
            await self.reject.guard(record, partial(self.store_one, event=event))

    async def store_one(self, record: Record, event: SinkEvent) -> None:
        problem = await self.write([event])
        if problem is not None:
            orig = getattr(problem, "orig", None) or problem
            await self.reject(record, Rejection("unwritable", str(orig)[:1000]))
            return
        self.common.events.labels(self.processor, "stored").inc()
