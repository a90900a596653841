"""The Faust app factory: every processor is built the same way from the settings."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeAlias, TypeVar

import faust
from aiokafka.errors import KafkaError as AIOKafkaError
from faust.exceptions import ProducerSendError
from kafka.errors import KafkaError
from pydantic import BaseModel
from sqlalchemy.exc import InterfaceError, OperationalError

from services.contract.codec import Rejection, decode_or_reject, encode
from services.contract.deadletter import dead_letter
from services.contract.settings import Settings
from services.contract.topics import Topic, partitions_for, spec_for, topic_name
from services.kafka.catalog import ScenarioCatalog
from services.kafka.lag import LagMonitor, lag_metrics
from services.runtime import faust_compat
from services.runtime.awaiting import log_on_signal
from services.runtime.credentials import faust_broker_credentials
from services.runtime.faust_compat.internals import consumer_state
from services.runtime.metrics import common_metrics, serve_metrics
from services.runtime.outage import BROKER, HEARTBEAT_S, Dependency, health, outage_metrics

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

# Failures of the infrastructure, not of the record: they are not the record's fault, so
# they are never turned into dead letters (the outage handling retries or restarts).
# Faust wraps the Kafka client's errors in a send into ProducerSendError.
INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (
    AIOKafkaError,
    KafkaError,
    ProducerSendError,
    OperationalError,
    InterfaceError,
    ConnectionError,
)

# One input record being handled (its value, key, topic, partition, offset, timestamp in
# `.message`). A processor's steps name it by this alias: only the runtime imports faust.
Record: TypeAlias = faust.types.EventT[bytes]
# A topic a processor's steps send to, named likewise.
OutputTopic: TypeAlias = faust.TopicT


def make_app(
    name: str,
    settings: Settings,
    linger_ms: int = 0,
    fetch_min_bytes: int = 1,
    fetch_max_wait_ms: int = 1500,
) -> faust.App:
    """One Faust app per processor; its id (prefix + name) is its consumer group.
    `linger_ms`: how long the producer gathers records into one request (for a processor
    that never awaits a single send, only the flush before each commit).
    `fetch_min_bytes`, `fetch_max_wait_ms`: how much the broker gathers, or how long it
    waits, before it answers a fetch (services/runtime/faust_compat/fetch.py); Faust's
    own are 1 byte and 1.5 s.
    Refuses another faust-streaming release than the pinned one, and installs passk's
    patches of it (docs/faust.md) before the first app is built."""
    faust_compat.apply()
    # Per app id (prefix + name): the RocksDB tables here (services.runtime.graded) belong
    # to one set of topics, and their stored changelog offsets mean nothing to another.
    datadir = settings.data_dir / "faust" / f"{settings.topic_prefix}{name}"
    datadir.mkdir(parents=True, exist_ok=True)  # faust creates only the last level
    app = faust.App(
        f"{settings.topic_prefix}{name}",
        broker=f"kafka://{settings.kafka_bootstrap_servers}",
        store="memory://",  # tables are rebuilt from their changelog topics on start
        topic_partitions=settings.topic_partitions,
        # What Faust creates itself (its leader topic) is replicated like ours; `passk
        # worker` resolves 0 (auto) from the cluster before the app is built.
        topic_replication_factor=settings.topic_replication or 1,
        broker_credentials=faust_broker_credentials(settings),
        web_enabled=False,
        # Commit every second: a worker killed mid-stream then reprocesses little, and the
        # processors' idempotency (deterministic event ids, keyed tables) drops repeats.
        # Not also every 100 records: Faust's reading loop awaits a count-triggered commit
        # inline (producer flush, then the offset commit's round trip), and with batches
        # of up to PASSK_BATCH_MAX records that stalled reading after nearly every batch.
        broker_commit_every=10_000,
        # At most this many records per fetch handed to the stream (Faust's default: all
        # that were fetched, up to 1 MiB per partition, parsed at once): it bounds what a
        # worker holds in RAM between the broker and its agent, and how far a join reads
        # past the moment its flow control pauses an input (services/runtime/flow.py).
        broker_max_poll_records=500,
        broker_commit_interval=1.0,
        producer_acks=-1,
        producer_linger_ms=linger_ms,
        producer_request_timeout=settings.producer_timeout_s,
        # Up to passk's broker limit (message.max.bytes 4 MiB): a dead letter carries an
        # input in base64, a third larger than the input (see deadletter.MAX_KEPT_BYTES).
        producer_max_request_size=4_000_000,
        table_cleanup_interval=30.0,
        consumer_auto_offset_reset="earliest",
        # A worker that dies is noticed within 15 s (not faust's 60 s), so its partitions
        # move to a live worker, or to its own restart, that much sooner.
        broker_session_timeout=15.0,
        broker_heartbeat_interval=3.0,
        datadir=str(datadir),
    )
    if (fetch_min_bytes, fetch_max_wait_ms) != (1, 1500):
        faust_compat.set_fetch(app, fetch_min_bytes, fetch_max_wait_ms)
    return app


def raw_inputs(app: faust.App, *topics: Topic, settings: Settings) -> faust.TopicT:
    """One agent's inputs: several co-partitioned topics of raw bytes, read as one stream."""
    return app.topic(
        *(topic_name(t, settings) for t in topics),
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )


BROKER_WATCH_S = 5.0


class Delivery:
    """Sending an agent's outputs so that an outage longer than the producer's own retry
    budget (Faust's producer_request_timeout) delays them instead of crashing the agent:
    a send that fails is sent again after a backoff, with the same event id (consumers
    drop repeats). The record being handled is not acked meanwhile."""

    def __init__(self, processor: str) -> None:
        self.broker = Dependency(BROKER, f"{processor}: delivering outputs")

    async def __call__(self, topic: faust.TopicT, key: bytes | None, value: bytes) -> None:
        async def send() -> None:
            fut = await topic.send(key=key, value=value)
            await fut

        await self.broker.call("send", send)


def unawaited_sender(
    app: faust.App, processor: str
) -> Callable[[str, bytes, bytes], Awaitable[None]]:
    """(topic name, key, value) handed to the Kafka producer without awaiting delivery: for
    a processor whose outputs need only be delivered before its offsets are committed
    (Faust flushes the producer before each commit). Straight to the producer, not
    through the Faust topic, whose per-record bookkeeping (futures, sensors, codecs)
    showed in the aggregate's profile. A record that failed is logged."""

    def failed(delivery: asyncio.Future) -> None:  # type: ignore[type-arg]
        if not delivery.cancelled() and delivery.exception() is not None:
            log.warning("%s: a record was not delivered: %r", processor, delivery.exception())

    async def send(topic: str, key: bytes, value: bytes) -> None:
        delivery = await app.producer.send(
            topic, key, value, partition=None, timestamp=None, headers=None
        )
        delivery.add_done_callback(failed)  # type: ignore[attr-defined]

    return send


async def broker_reachable(bootstrap: str, timeout: float = 3.0) -> None:
    """Raises OSError unless some bootstrap address accepts a TCP connection."""
    last: OSError = OSError(f"no bootstrap address in {bootstrap!r}")
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            async with asyncio.timeout(timeout):
                _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
        except (OSError, TimeoutError, ValueError) as exc:
            last = exc if isinstance(exc, OSError) else OSError(str(exc) or "timed out")
            continue
        writer.close()
        return
    raise last


def run_alongside(
    app: faust.App, settings: Settings, catalog: ScenarioCatalog | None = None
) -> None:
    """What every worker runs beside its agents: /metrics when a port is set, with its
    consumer lag read from the broker, and the scenario catalog's consumer closed on
    shutdown."""

    @app.task
    async def start_metrics() -> None:
        serve_metrics(settings.metrics_port, host=settings.metrics_host)

    # (The root logger's level in a worker: services/runtime/faust_compat/worker_log.py.)

    outage_metrics()  # every worker exports the heartbeat gauge from its first scrape on

    @app.task
    async def first_heartbeat() -> None:  # a timer's first call is an interval late
        health().beat(outage_metrics())

    @app.task
    async def tell_on_sigusr2() -> None:  # on the worker's loop, once it runs
        log_on_signal(asyncio.get_running_loop(), lambda: "consumer:\n" + consumer_state(app))

    @app.timer(interval=HEARTBEAT_S)
    async def heartbeat() -> None:
        # Run by the event loop, so a stopped process or a blocked loop goes quiet, and
        # `passk status` (and an alert on the gauge) calls it stalled.
        health().beat(outage_metrics())

    # Faust's own clients reconnect by themselves; this only makes an outage visible
    # (passk_degraded, the health file) in every worker, not only those with timers.
    broker = Dependency(BROKER, f"{app.conf.id}: connecting", max_backoff_s=5.0)

    @app.timer(interval=BROKER_WATCH_S)
    async def watch_broker() -> None:
        try:
            await broker_reachable(settings.kafka_bootstrap_servers)
        except OSError as exc:
            broker.failed("connect", exc)
        else:
            broker.succeeded()

    # make_app names the consumer group prefix + processor; the lag is that group's.
    lag = LagMonitor(app.conf.id[len(settings.topic_prefix) :], settings, lag_metrics())

    @app.timer(settings.lag_interval_s)
    async def export_lag() -> None:
        if settings.metrics_port:
            await asyncio.get_running_loop().run_in_executor(None, lag.poll)

    @app.on_before_shutdown.connect  # type: ignore[arg-type]  # stub wants a signal kwarg
    async def close_lag(sender: faust.App, **_: object) -> None:
        lag.close()

    if catalog is not None:

        @app.on_before_shutdown.connect  # type: ignore[arg-type]  # stub wants a signal kwarg
        async def close_catalog(sender: faust.App, **_: object) -> None:
            await catalog.stop()


def raw_topic(app: faust.App, topic: Topic, settings: Settings) -> faust.TopicT:
    """A topic of raw bytes: decoding (and dead-lettering) happens in our code, not Faust's."""
    spec = spec_for(topic)
    return app.topic(
        topic_name(topic, settings),
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions_for(spec, settings),
        internal=False,
    )


class DeadLetters:
    """A processor's way out for what it cannot use: the original message, whole, with
    where it came from and why, to the dead-letter topic; counted; then the stream goes on."""

    def __init__(self, app: faust.App, processor: str, settings: Settings):
        self.topic = raw_topic(app, Topic.DEAD_LETTERS, settings)
        self.processor = processor
        self.settings = settings
        self.deliver = Delivery(processor)

    async def decoded(self, event: Record, model: type[M]) -> M | None:
        """The record as `model`, within the settings' bounds on every input; None once it
        is a dead letter (why: the codec's reason)."""
        found = decode_or_reject(event.value, model, self.settings)
        if isinstance(found, Rejection):
            await self(event, found)
            return None
        return found

    async def __call__(self, event: Record, rejection: Rejection) -> None:
        message = event.message
        record = dead_letter(
            processor=self.processor,
            source_topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            key=message.key,
            value=message.value,
            rejection=rejection,
        )
        # delivered before the offending message is acked
        await self.deliver(self.topic, message.key, encode(record))
        metrics = common_metrics()
        metrics.dead_letters.labels(message.topic, rejection.reason).inc()
        metrics.events.labels(self.processor, "rejected").inc()

    async def guard(self, event: Record, handle: Callable[[Record], Awaitable[None]]) -> None:
        """Handle one record; whatever it raises (a bug, a shape no check foresaw) makes
        that record a dead letter ("processing_error") and the stream goes on, instead of
        crashing the agent and having Faust restart past it. Outages still propagate."""
        try:
            await handle(event)
        except INFRASTRUCTURE_ERRORS:
            raise
        except Exception as exc:
            message = event.message
            log.exception(
                "%s: could not process %s[%s]@%s; sent to the dead-letter topic",
                self.processor,
                message.topic,
                message.partition,
                message.offset,
            )
            # RecursionError's message says nothing useful; its name does.
            detail = f"{type(exc).__name__}: {exc}"[:1000]
            await self(event, Rejection("processing_error", detail))
