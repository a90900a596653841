"""The producer SDK: how a harness or a product writes its input events to passk.

One `TrafficProducer` per process. Every event goes to its topic keyed by session_id,
so both events of one trial land on the same partition, in the order they were sent.
Every send is accounted for: acknowledged sends are counted per topic and failed ones
are kept (with what was being sent and why), never dropped silently.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
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
from services.kafka.kafka_client import kafka_client_kwargs

TOPIC_METADATA_GRACE_S = 5.0

TOPIC_FOR_TYPE: dict[type, Topic] = {
    ConversationFinished: Topic.CONVERSATION_FINISHED,
    SessionPersisted: Topic.SESSION_PERSISTED,
}


@dataclass(frozen=True)
class SendFailure:
    topic: str
    key: bytes | None
    ref: str  # what was being sent: an event id, a file line, ...
    error: str


class SendError(KafkaError):
    """A send refused before it reached the producer's queue (serialisation, size, metadata)."""


def _idempotence_supported() -> bool:
    return "enable_idempotence" in KafkaProducer.DEFAULT_CONFIG


def _describe(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}"


def _refuse_auto_create(producer: KafkaProducer, allow: bool) -> None:
    # kafka-python 3.0.12 builds the producer's ClusterMetadata without passing
    # allow_auto_create_topics on, so its metadata requests still ask the broker to
    # create a missing topic; set it where the request is built.
    cluster = getattr(producer, "_metadata", None)
    if cluster is not None and isinstance(getattr(cluster, "config", None), dict):
        cluster.config["allow_auto_create_topics"] = allow


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
        )
        if _idempotence_supported():
            # Idempotence keeps per-partition order across retries (at most 5 in flight),
            # which is what makes "same key, file order" hold.
            config["enable_idempotence"] = True
        config.update(overrides)
        self._producer = KafkaProducer(**config)
        _refuse_auto_create(self._producer, config["allow_auto_create_topics"])
        self._lock = threading.Lock()
        self._acked: Counter[str] = Counter()
        self._failures: list[SendFailure] = []
        self._pending = 0
        self._unreachable: dict[str, str] = {}  # topic -> why metadata could not be had

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
            return self._failed(topic, key, ref, SendError(self._unreachable[topic]))
        try:
            future = self._producer.send(topic, value=value, key=key)
        except KafkaTimeoutError as exc:
            self._unreachable[topic] = f"topic {topic} unavailable ({_describe(exc)})"
            return self._failed(topic, key, ref, exc)
        except (KafkaError, ValueError, TypeError) as exc:
            return self._failed(topic, key, ref, exc)
        with self._lock:
            self._pending += 1
        future.add_callback(self._on_ack, topic)
        future.add_errback(self._on_error, topic, key, ref)
        return future

    def _on_ack(self, topic: str, _metadata: Any) -> None:
        with self._lock:
            self._pending -= 1
            self._acked[topic] += 1

    def _on_error(self, topic: str, key: bytes | None, ref: str, exc: BaseException) -> None:
        with self._lock:
            self._pending -= 1
            self._failures.append(SendFailure(topic, key, ref, _describe(exc)))

    def _failed(self, topic: str, key: bytes | None, ref: str, exc: BaseException) -> Future:
        with self._lock:
            self._failures.append(SendFailure(topic, key, ref, _describe(exc)))
        return Future().failure(exc)

    def missing_topics(self, topics: list[str],
                       grace_s: float = TOPIC_METADATA_GRACE_S) -> list[str]:
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

    @property
    def acked(self) -> dict[str, int]:
        """Acknowledged sends per topic name."""
        with self._lock:
            return dict(self._acked)

    @property
    def failures(self) -> list[SendFailure]:
        with self._lock:
            return list(self._failures)

    @property
    def pending(self) -> int:
        """Sent but neither acknowledged nor failed yet."""
        with self._lock:
            return self._pending

    # ------------------------------------------------------------------ lifecycle

    def flush(self, timeout: float | None = None) -> None:
        """Block until every send so far is acknowledged or failed (or the timeout passes)."""
        try:
            self._producer.flush(timeout=timeout)
        except KafkaTimeoutError:
            pass  # what is still pending is reported by the caller through `pending`

    def close(self, timeout: float | None = None) -> None:
        self.flush(timeout)
        self._producer.close(timeout=timeout)

    def __enter__(self) -> TrafficProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
