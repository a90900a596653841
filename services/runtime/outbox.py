"""Sending a batch's outputs without a broker round trip per input record.

A processor that awaited each output's delivery before reading its next input ran one
acks=all round trip per record: a latency-bound loop. Instead, the agent reads its input
in bounded batches (`take_events`), sends every output of the batch at once, and awaits
them together; only then does it write the batch's state (its table) and let the batch
be acked. The order that keeps a SIGKILL from losing a trial is unchanged: an output is
delivered before the table remembers its trial as done, and a record is acked (so its
offset can be committed) only after both. A crash before that re-reads the batch, which
re-sends the same event ids (consumers drop repeats).

The batch size bounds the sends in flight (backpressure): the next batch is not read
until this one is delivered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import faust

from services.runtime.app import Delivery, Record
from services.runtime.faust_compat import as_current_event, current_event


@contextmanager
def handling(event: Record) -> Iterator[None]:
    """Make `event` the one being processed, as Faust does inside `stream.events()`.

    Inside `take_events` the agent's body runs with no current event, yet Faust writes a
    table's changelog to the partition of the current event (and the RocksDB store picks
    its partition's database by it): each record of a batch is handled, and its state
    written, as the current event.
    """
    with as_current_event(event):
        yield


class Outbox:
    """One batch's pending outputs and the state writes that must wait for them.

    `send` starts a send and returns at once; `get`/`put` read and write the batch's view
    of a table (writes held back, reads seeing them); `deliver` awaits every send
    (re-sending with backoff any that failed, like `Delivery`) and then applies the held
    writes, each as the event that made it.
    """

    def __init__(
        self,
        processor: str,
        read: Callable[[str], Any] = lambda key: None,
        apply: Callable[[str, Any], None] = lambda key, value: None,
    ) -> None:
        self.delivery = Delivery(processor)
        self.read = read
        self.apply = apply
        self._sent: list[tuple[asyncio.Future[Any], faust.TopicT, bytes | None, bytes]] = []
        self._writes: dict[str, tuple[Record, Any]] = {}

    async def send(self, topic: faust.TopicT, key: bytes | None, value: bytes) -> None:
        try:
            # Straight to the Kafka producer, not through the Faust topic, whose per-record
            # bookkeeping (future messages, codecs, sensors) showed in the profiles; the
            # partition is the producer's from the key either way.
            fut = await topic.app.producer.send(
                topic.get_topic_name(), key, value, partition=None, timestamp=None, headers=None
            )
        except Exception:  # could not even be queued (a broker outage): retried with backoff
            await self.delivery(topic, key, value)
            return
        self._sent.append((asyncio.ensure_future(fut), topic, key, value))

    def get(self, key: str) -> Any:
        held = self._writes.get(key)
        return held[1] if held is not None else self.read(key)

    def put(self, key: str, value: Any) -> None:
        """Hold `value` (None: delete) for `key` until the batch's outputs are delivered."""
        event = current_event()
        if event is None:
            raise RuntimeError("Outbox.put outside of a record being handled")
        self._writes[key] = (event, value)

    def pending(self) -> int:
        return len(self._sent)

    async def deliver(self) -> None:
        sent, self._sent = self._sent, []
        results = await asyncio.gather(*(fut for fut, *_ in sent), return_exceptions=True)
        for (_, topic, out_key, out_value), result in zip(sent, results, strict=True):
            if isinstance(result, Exception):
                await self.delivery(topic, out_key, out_value)
            elif isinstance(result, BaseException):  # cancelled: the batch is read again
                raise result
        writes, self._writes = self._writes, {}
        for key, (event, value) in writes.items():
            with handling(event):
                self.apply(key, value)

    async def run(
        self,
        stream: faust.StreamT[bytes],
        handle: Callable[[Record], Any],
        *,
        batch_max: int,
        within_s: float,
        concurrently: bool = False,
    ) -> None:
        """An agent's loop: read `stream` in batches of at most `batch_max` records (waiting
        at most `within_s` for one to fill), handle each as the current event (one after
        another, or `concurrently`), deliver the batch's outputs and write its state; the
        batch is acked when the next one is taken."""
        # take_events is on faust.Stream, missing from the StreamT protocol in its stubs.
        batches = stream.take_events(batch_max, within=within_s)  # type: ignore[attr-defined]

        async def one(event: Record) -> None:
            with handling(event):
                await handle(event)

        async for events in batches:
            if concurrently:
                await asyncio.gather(*(one(event) for event in events))
            else:
                for event in events:
                    await one(event)
            await self.deliver()
