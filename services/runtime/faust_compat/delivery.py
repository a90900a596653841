"""No offset commit past a record the producer failed to deliver (installed by `apply`).

Faust flushes the producer before each offset commit, and then commits whatever the
flush's outcome. A record the producer gave up on (a broker outage longer than
`producer_request_timeout`, PASSK_PRODUCER_TIMEOUT_S) only fails its own future: a
table's changelog write is then lost while the offsets of the events that made it are
committed, so no restart brings it back; and an output sent without awaiting its
delivery (the aggregate's re-keyed verdicts and figures) is lost the same way.

The patch remembers the delivery of every record the producer takes, and after each
flush looks whether one of them failed: if so, the flush raises ProducerSendError, so
nothing is committed, the worker stops (Faust crashes the consumer whose commit raised)
and its supervisor restarts it, which reads again from the last committed offset. A
record whose send itself raised counts the same. Deliveries still pending after a
flush were sent during it, for events the commit does not cover; they are looked at by
the next flush.
"""

from __future__ import annotations

import asyncio
from typing import Any

from faust.exceptions import ProducerSendError
from faust.transport.drivers.aiokafka import Producer

from services.runtime.faust_compat.patching import Patch

_SENT = "_passk_deliveries"  # futures of the records handed over since the last flush
_FAILED = "_passk_send_errors"  # sends that raised since the last flush


def undelivered(producer: Any) -> list[BaseException]:
    """What failed among the records `producer` took since the last look; forgets those
    settled (delivered or failed), keeps those still pending."""
    deliveries: list[asyncio.Future[Any]] = getattr(producer, _SENT, [])
    failed = [d.exception() for d in deliveries if d.done() and not d.cancelled()]
    errors = [*getattr(producer, _FAILED, []), *(e for e in failed if e is not None)]
    setattr(producer, _SENT, [d for d in deliveries if not d.done()])
    setattr(producer, _FAILED, [])
    return errors


def _kept(producer: Any, name: str) -> list[Any]:
    if not hasattr(producer, name):
        setattr(producer, name, [])
    kept: list[Any] = getattr(producer, name)
    return kept


def _install() -> None:
    original_send = Producer.send
    original_flush = Producer.flush

    async def send(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            delivery = await original_send(self, *args, **kwargs)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            _kept(self, _FAILED).append(exc)
            raise
        if isinstance(delivery, asyncio.Future):
            _kept(self, _SENT).append(delivery)
        return delivery

    async def flush(self: Any) -> None:
        await original_flush(self)
        if errors := undelivered(self):
            raise ProducerSendError(
                f"{len(errors)} record(s) not delivered since the last offset commit "
                f"(first: {errors[0]!r}); not committing, so they are made again after a "
                "restart (PASSK_PRODUCER_TIMEOUT_S bounds how long a record is retried)")

    Producer.send = send  # type: ignore[method-assign]
    Producer.flush = flush  # type: ignore[method-assign]


PATCH = Patch(_install)
