"""The Faust app factory: every processor is built the same way from the settings."""

from __future__ import annotations

import faust

from services.common.codec import Rejection
from services.common.settings import Settings, get_settings
from services.common.topics import Topic, partitions_for, spec_for, topic_name


def make_app(name: str, settings: Settings | None = None) -> faust.App:
    """One Faust app per processor; its id (prefix + name) is its consumer group."""
    settings = settings or get_settings()
    datadir = settings.data_dir / "faust" / name
    datadir.mkdir(parents=True, exist_ok=True)  # faust creates only the last level
    return faust.App(
        f"{settings.topic_prefix}{name}",
        broker=f"kafka://{settings.kafka_bootstrap_servers}",
        store="memory://",  # tables are rebuilt from their changelog topics on start
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=1,
        web_enabled=False,
        # Commit often: a worker killed mid-stream then reprocesses little, and the
        # processors' idempotency (deterministic event ids, keyed tables) drops repeats.
        broker_commit_every=100,
        broker_commit_interval=1.0,
        producer_acks=-1,
        # Up to passk's broker limit (message.max.bytes 4 MiB): a dead letter carries an
        # input in base64, a third larger than the input (see deadletter.MAX_KEPT_BYTES).
        producer_max_request_size=4_000_000,
        table_cleanup_interval=30.0,
        consumer_auto_offset_reset="earliest",
        datadir=str(datadir),
    )


def raw_topic(app: faust.App, topic: Topic, settings: Settings | None = None) -> faust.TopicT:
    """A topic of raw bytes: decoding (and dead-lettering) happens in our code, not Faust's."""
    settings = settings or get_settings()
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


async def send_dead_letter(
    dead_letters: faust.TopicT,
    *,
    processor: str,
    event: faust.types.EventT,
    rejection: Rejection,
) -> None:
    """Send what could not be used, whole, with where it came from and why; then go on."""
    from services.common.codec import encode
    from services.common.deadletter import dead_letter

    message = event.message
    record = dead_letter(
        processor=processor,
        source_topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        rejection=rejection,
    )
    await dead_letters.send(key=message.key, value=encode(record))
