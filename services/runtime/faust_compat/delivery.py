"""Every worker's records reach each partition in order and without a hole, however long
the broker is gone (installed by `apply`; docs/faust.md, patch 10).

passk's tables are written to survive a cut: after a crash, what stands in a changelog
partition must be a *prefix* of what was written to it (services/aggregate/domain.py).
Faust 0.15.3's producer did not keep that across an outage longer than its timeout
(`producer_request_timeout`, PASSK_PRODUCER_TIMEOUT_S): a batch it gave up on only failed
its own future, the records sent after it were still delivered once the broker was back,
and the next offset commit covered the events that made them. Three things close it:

1. **An idempotent producer.** Faust asks aiokafka for one only in its exactly-once mode;
   here every worker's producer is built with `enable_idempotence=True` (acks=all, which
   passk sets anyway). aiokafka then numbers each partition's batches and retries a batch
   until the broker has it instead of expiring it, and the broker takes a partition's
   batches only in sequence: a batch that did fail (a non-retriable error, or a batch
   expired while its partition had no leader) makes every later batch of that partition
   fail too (OutOfOrderSequenceNumber) instead of landing after a hole.
2. **No send after a failure.** A record refused before it got a sequence number (the
   producer's buffer full past the timeout, the topic's metadata not had in time) leaves
   no gap the broker could see, so once any send raised or any delivery failed, this
   producer takes nothing more: every later send raises `ProducerSendError`.
3. **No commit past a failure.** Faust flushes the producer before each offset commit and
   then commits whatever became of the flushed records; after a failure the flush raises
   instead, every time, so no offset is committed again, the consumer's commit crashes
   the worker, and its supervisor restarts it from its last commit, which reads the
   events whose writes were lost again.

A worker that never saw a failure is unchanged but for the idempotence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from faust.exceptions import ProducerSendError
from faust.transport.drivers.aiokafka import Producer

from services.runtime.faust_compat.patching import Patch

_FAILED = "_passk_undelivered"  # the first failure this producer saw (sticky)


class ProducerFenced(ProducerSendError):
    """This producer saw a record fail: it sends nothing more, and commits nothing more."""


def first_failure(producer: Any) -> BaseException | None:
    failure: BaseException | None = getattr(producer, _FAILED, None)
    return failure


def _fail(producer: Any, exc: BaseException) -> None:
    if first_failure(producer) is None:
        setattr(producer, _FAILED, exc)


def _fenced(producer: Any, doing: str) -> ProducerFenced:
    return ProducerFenced(
        f"not {doing}: a record was not delivered ({first_failure(producer)!r}), so this "
        "worker sends and commits nothing more; its supervisor restarts it from its last "
        "offset commit (PASSK_PRODUCER_TIMEOUT_S bounds how long a record is retried "
        "before it is given up)"
    )


def _install() -> None:
    original_extra = Producer._settings_extra
    original_send = Producer.send
    original_flush = Producer.flush

    def _settings_extra(self: Any) -> Mapping[str, Any]:
        return {**original_extra(self), "acks": "all", "enable_idempotence": True}

    async def send(self: Any, *args: Any, **kwargs: Any) -> Any:
        if first_failure(self) is not None:
            raise _fenced(self, "sending")
        try:
            delivery = await original_send(self, *args, **kwargs)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            _fail(self, exc)
            raise
        if isinstance(delivery, asyncio.Future):

            def settled(done: asyncio.Future[Any]) -> None:
                if not done.cancelled() and done.exception() is not None:
                    _fail(self, done.exception())  # type: ignore[arg-type]

            delivery.add_done_callback(settled)
        return delivery

    async def flush(self: Any) -> None:
        await original_flush(self)
        if first_failure(self) is not None:
            raise _fenced(self, "committing")

    _settings_extra.__wrapped__ = original_extra  # type: ignore[attr-defined]
    send.__wrapped__ = original_send  # type: ignore[attr-defined]
    flush.__wrapped__ = original_flush  # type: ignore[attr-defined]
    Producer._settings_extra = _settings_extra  # type: ignore[method-assign]
    Producer.send = send  # type: ignore[method-assign]
    Producer.flush = flush  # type: ignore[method-assign]


PATCH = Patch(_install)
