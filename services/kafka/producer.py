"""The producer SDK: how a harness or a product writes its input events to passk.

One `TrafficProducer` per process. Every event goes to its topic keyed by session_id,
so both events of one trial land on the same partition, in the order they were sent.
Every send is accounted for (services/kafka/delivery.py): acknowledged sends are counted
per topic, and a send that failed or was never acknowledged is reported with what was
being sent and why, first sent first, never dropped silently. Nothing waits for the broker
without a deadline: a record is given up after PASSK_PRODUCER_DELIVERY_TIMEOUT_S, and
`settle` and `close` wait at most that long plus `DEADLINE_GRACE_S`.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError
from kafka.future import Future
from kafka.producer.future import FutureRecordMetadata

from schemas.events import ConversationFinished, SessionPersisted
from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.admin import ask_admin
from services.kafka.delivery import DeliveryReport, Ledger, Undelivered, describe
from services.kafka.kafka_client import kafka_client_kwargs

TOPIC_METADATA_GRACE_S = 5.0
# Past the delivery timeout, how long more a command waits for the client to report what
# it gave up (it looks at expired records once per loop), before giving up itself.
DEADLINE_GRACE_S = 15.0
# A forced close: how long the client's I/O thread gets to fail what it still held.
FORCE_CLOSE_S = 5.0
NOT_ACKNOWLEDGED = "not acknowledged by the broker"

TOPIC_FOR_TYPE: dict[type, Topic] = {
    ConversationFinished: Topic.CONVERSATION_FINISHED,
    SessionPersisted: Topic.SESSION_PERSISTED,
}

__all__ = ["DeliveryReport", "TrafficProducer", "Undelivered", "topic_for"]


class SendError(KafkaError):
    """A send refused before it reached the producer's queue (serialisation, size, metadata)."""


def _refuse_auto_create(producer: KafkaProducer, allow: bool) -> None:
    # kafka-python 3.0.12 builds the producer's ClusterMetadata without passing
    # allow_auto_create_topics on, so its metadata requests still ask the broker to
    # create a missing topic; set it where the request is built.
    cluster = getattr(producer, "_metadata", None)
    if cluster is not None and isinstance(getattr(cluster, "config", None), dict):
        cluster.config["allow_auto_create_topics"] = allow


def delivery_config(delivery_timeout_s: float, linger_ms: int) -> dict[str, Any]:
    """kafka-python settings that bound a record's life and keep a partition's order.

    Not idempotent: kafka-python 3.0.12's idempotent producer, once a batch it had already
    sent expires (a broker away past the delivery timeout), drops its producer id and
    from then on neither sends nor expires anything, even with the broker back (seen:
    1,758 of 2,000 records still waiting 40 s after the broker was back, and the replay of
    issue 29 in `flush` for ever). One request in flight per
    connection keeps a partition's order across retries as idempotence did; a retry after
    a lost acknowledgement can write a record twice, and consumers drop the repeat by its
    event_id (docs/contract.md). kafka-python requires the delivery timeout above the
    request timeout plus the linger."""
    delivery_ms = int(delivery_timeout_s * 1000)
    return dict(
        enable_idempotence=False,
        max_in_flight_requests_per_connection=1,
        delivery_timeout_ms=delivery_ms,
        request_timeout_ms=max(min(30_000, (delivery_ms - linger_ms) // 2), 500),
    )


def topic_for(event: ConversationFinished | SessionPersisted) -> Topic:
    try:
        return TOPIC_FOR_TYPE[type(event)]
    except KeyError:
        raise TypeError(
            f"TrafficProducer sends ConversationFinished or SessionPersisted, "
            f"not {type(event).__name__}"
        ) from None


class TrafficProducer:
    """Send input events to passk's topics; use as a context manager, or call close()."""

    def __init__(
        self,
        settings: Settings,
        *,
        linger_ms: int = 5,
        max_block_ms: int = 30_000,
        **overrides: Any,
    ) -> None:
        self.settings = settings
        config: dict[str, Any] = dict(
            **kafka_client_kwargs(self.settings),
            acks="all",
            linger_ms=linger_ms,
            max_block_ms=max_block_ms,
            # A missing topic is an operator error (`passk topics create`), not something
            # to paper over with a broker-default topic of the wrong shape.
            allow_auto_create_topics=False,
            client_id="passk-producer",
            **delivery_config(settings.producer_delivery_timeout_s, linger_ms),
        )
        config.update(overrides)
        self.deadline_s = config["delivery_timeout_ms"] / 1000 + DEADLINE_GRACE_S
        self._producer = KafkaProducer(**config)
        _refuse_auto_create(self._producer, config["allow_auto_create_topics"])
        self._ledger = Ledger()
        self._unreachable: dict[str, str] = {}  # topic -> why metadata could not be had
        self._closed = False

    # ------------------------------------------------------------------ sending

    def send(
        self, event: ConversationFinished | SessionPersisted, *, ref: str | None = None
    ) -> FutureRecordMetadata | Future:
        """Send one event to its topic, keyed by its session_id."""
        topic = topic_name(topic_for(event), self.settings)
        return self.send_raw(
            topic, event.session_id.encode("utf-8"), encode(event), ref=ref or event.event_id
        )

    def send_raw(
        self, topic: str, key: bytes | None, value: bytes, *, ref: str = ""
    ) -> FutureRecordMetadata | Future:
        """Send bytes as they are. A failure is recorded and the returned future has failed."""
        if topic in self._unreachable:
            # Metadata already timed out once: fail fast instead of blocking per record.
            return self._refused(topic, ref, SendError(self._unreachable[topic]))
        try:
            future = self._producer.send(topic, value=value, key=key)
        except KafkaTimeoutError as exc:
            self._unreachable[topic] = f"topic {topic} unavailable ({describe(exc)})"
            return self._refused(topic, ref, exc)
        except (KafkaError, ValueError, TypeError) as exc:
            return self._refused(topic, ref, exc)
        number = self._ledger.sent(ref, topic)
        future.add_callback(lambda _metadata: self._ledger.acknowledged(number))
        future.add_errback(lambda exc: self._ledger.failed(number, describe(exc)))
        return future

    def _refused(self, topic: str, ref: str, exc: BaseException) -> Future:
        self._ledger.refused(ref, topic, describe(exc))
        return Future().failure(exc)

    def missing_topics(
        self, topics: list[str], grace_s: float = TOPIC_METADATA_GRACE_S
    ) -> list[str]:
        """Which of these topics the broker does not have, creating none. A topic missing
        is asked for again for `grace_s`: right after `passk topics create` (another
        process) a busy broker's metadata can still lag the controller by a second or
        two (seen in CI with a benchmark running), and that topic is not missing."""
        deadline = time.monotonic() + grace_s
        while True:
            existing = set(ask_admin(self.settings, lambda admin: admin.list_topics()))
            missing = [t for t in topics if t not in existing]
            if not missing or time.monotonic() >= deadline:
                return missing
            time.sleep(0.5)

    # ------------------------------------------------------------------ accounting

    def report(self) -> DeliveryReport:
        """Acknowledged sends per topic, and every send not delivered (failed, or not yet
        acknowledged), first sent first."""
        return self._ledger.report(NOT_ACKNOWLEDGED)

    @property
    def acked(self) -> dict[str, int]:
        """Acknowledged sends per topic name."""
        return self.report().acked

    @property
    def pending(self) -> int:
        """Sent but neither acknowledged nor failed yet."""
        return self._ledger.waiting

    # ------------------------------------------------------------------ lifecycle

    def settle(self, timeout_s: float | None = None) -> bool:
        """Wait until every send so far is acknowledged or failed, at most `timeout_s`
        (default: the delivery timeout and its grace); True when none is left waiting.
        kafka-python's own `flush` is not used: its timeout applies to each batch in turn,
        and it waits for ever on records its client has stopped sending."""
        return self._ledger.wait_settled(self.deadline_s if timeout_s is None else timeout_s)

    def flush(self, timeout: float | None = None) -> None:
        """`settle`, for callers of the old name; what is left is in `report()`."""
        self.settle(timeout)

    def close(self, timeout_s: float | None = None) -> None:
        """Wait for the sends (as `settle`), then close. What is still waiting then is
        given up and reported as not acknowledged, and the client is closed without
        waiting for it: a SIGINT during the wait gives up at once the same way."""
        if self._closed:
            return
        self._closed = True
        wait = self.deadline_s if timeout_s is None else timeout_s
        settled = False
        try:
            settled = self.settle(wait)
        finally:
            if not settled:
                self._ledger.give_up(f"{NOT_ACKNOWLEDGED} within {wait:g} s")
                self._force_close()
            try:
                self._producer.close(timeout=FORCE_CLOSE_S)
            except KafkaError:
                pass

    def _force_close(self) -> None:
        # KafkaProducer.close(timeout) first flushes, which raises when records are left
        # and then never closes (and its __del__ and atexit hook try again, noisily). Its
        # I/O thread's force_close fails what it still holds, after which close is quick.
        sender = getattr(self._producer, "_sender", None)
        if sender is None:
            return
        sender.force_close()
        sender.join(FORCE_CLOSE_S)
        if sender.is_alive():  # never seen; still, a command must end
            self._producer._closed = True

    def __enter__(self) -> TrafficProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
