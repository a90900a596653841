"""Bytes through the real broker: what a producer writes with kafka-python is what a processor
reads with aiokafka (Faust's driver), keys land where the gate's join expects them, and what
a Faust raw topic sends is readable by anyone."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kafka import KafkaProducer
from pydantic import BaseModel

from schemas.events import ConversationFinished, DeadLetter, SessionPersisted, TrialVerdict
from services.contract.codec import Rejection, decode, encode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.runtime.app import DeadLetters, make_app, raw_topic
from tests.support import read_topic
from tests.unit.schemas.samples import SAMPLES, sample

pytestmark = pytest.mark.integration

SESSIONS = [f"s-{i}" for i in range(12)]


def conversation(session: str, n: int = 0) -> ConversationFinished:
    return ConversationFinished.model_validate(
        sample(
            ConversationFinished,
            event_id=f"cf-{session}-{n}",
            session_id=session,
            trial_id=f"t-{session}-{n}",
            harness_build="7.1",  # unknown to this version: must survive the trip
        )
    )


def persisted(session: str) -> SessionPersisted:
    return SessionPersisted.model_validate(
        sample(SessionPersisted, event_id=f"sp-{session}", session_id=session)
    )


@pytest.fixture
def producer(settings: Settings) -> Iterator[KafkaProducer]:
    p = KafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all")
    try:
        yield p
    finally:
        p.close(timeout=10)


def produce(producer: KafkaProducer, settings: Settings, topic: Topic, event: Any) -> int:
    """Send one input event keyed by its session; the partition it landed on."""
    future = producer.send(
        topic_name(topic, settings), key=event.session_id.encode(), value=encode(event)
    )
    return future.get(timeout=30).partition


async def consume(
    settings: Settings, topics: dict[str, type[BaseModel]], count: int, timeout: float = 30.0
) -> list[tuple[str, bytes | None, int, Any]]:
    """Read `count` records from the start as a processor does: (topic, key, partition, decoded)."""
    consumer = AIOKafkaConsumer(
        *topics,
        bootstrap_servers=settings.kafka_bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    out: list[tuple[str, bytes | None, int, Any]] = []
    try:
        async with asyncio.timeout(timeout):
            while len(out) < count:
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    for r in records:
                        out.append((r.topic, r.key, r.partition, decode(r.value, topics[r.topic])))
    except TimeoutError:
        pytest.fail(f"read {len(out)} of {count} records within {timeout}s")
    finally:
        await consumer.stop()
    return out


async def test_input_events_from_kafka_python_decode_to_equal_models(
    settings: Settings, producer: KafkaProducer
) -> None:
    sent: dict[str, tuple[BaseModel, int]] = {}
    for session in SESSIONS:
        for n in range(2):  # two trials of one session: same key
            event = conversation(session, n)
            where = produce(producer, settings, Topic.CONVERSATION_FINISHED, event)
            sent[event.event_id] = (event, where)
        event = persisted(session)
        sent[event.event_id] = (event, produce(producer, settings, Topic.SESSION_PERSISTED, event))

    cf = topic_name(Topic.CONVERSATION_FINISHED, settings)
    sp = topic_name(Topic.SESSION_PERSISTED, settings)
    received = await consume(settings, {cf: ConversationFinished, sp: SessionPersisted}, len(sent))

    assert len(received) == len(sent)
    for topic, key, partition, decoded in received:
        assert isinstance(decoded, ConversationFinished | SessionPersisted), decoded
        event, sent_partition = sent[decoded.event_id]
        assert decoded == event
        assert decoded.model_extra == event.model_extra
        assert key == event.session_id.encode()  # type: ignore[attr-defined]
        assert partition == sent_partition
        assert topic == (cf if isinstance(event, ConversationFinished) else sp)

    # Same key, same partition: both trials of a session, and (the gate's join needs this)
    # its conversation and its persisted session on the two co-partitioned topics.
    by_session: dict[str, set[int]] = {}
    for _, key, partition, _ in received:
        by_session.setdefault(key.decode(), set()).add(partition)  # type: ignore[union-attr]
    assert all(len(parts) == 1 for parts in by_session.values()), by_session
    assert len({p for parts in by_session.values() for p in parts}) > 1  # keys do spread


async def test_kafka_python_aiokafka_and_faust_partition_keys_alike(
    settings: Settings, producer: KafkaProducer
) -> None:
    # Replay writes with kafka-python, processors with aiokafka through Faust: a key must
    # land on the same partition whoever writes it, or co-partitioned joins miss.
    name = topic_name(Topic.SESSION_PERSISTED, settings)
    by_kafka_python = {
        s: produce(producer, settings, Topic.SESSION_PERSISTED, persisted(s)) for s in SESSIONS
    }

    aio = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all")
    await aio.start()
    try:
        by_aiokafka = {
            s: (await aio.send_and_wait(name, key=s.encode(), value=encode(persisted(s)))).partition
            for s in SESSIONS
        }
    finally:
        await aio.stop()

    app = make_app("transport-test", settings)
    topic = raw_topic(app, Topic.SESSION_PERSISTED, settings)
    try:
        by_faust = {}
        for s in SESSIONS:
            pending = await topic.send(key=s.encode(), value=encode(persisted(s)))
            by_faust[s] = (await pending).partition
    finally:
        await app.producer.stop()

    assert by_kafka_python == by_aiokafka == by_faust


async def test_a_faust_raw_topic_send_is_readable_by_kafka_python(settings: Settings) -> None:
    verdicts = [
        TrialVerdict.model_validate(
            sample(TrialVerdict, event_id=f"verdict:t-{i}", trial_id=f"t-{i}")
        )
        for i in range(5)
    ]
    app = make_app("transport-test", settings)
    topic = raw_topic(app, Topic.TRIAL_VERDICTS, settings)
    partitions = {}
    try:
        for verdict in verdicts:
            pending = await topic.send(key=verdict.trial_id.encode(), value=encode(verdict))
            partitions[verdict.trial_id] = (await pending).partition
    finally:
        await app.producer.stop()

    records = read_topic(settings, Topic.TRIAL_VERDICTS, min_count=len(verdicts))
    assert len(records) == len(verdicts)
    for key, value, partition in records:
        assert key is not None
        trial_id = key.decode()
        assert value == json.loads(encode(next(v for v in verdicts if v.trial_id == trial_id)))
        assert TrialVerdict.model_validate(value).trial_id == trial_id
        assert partition == partitions[trial_id]


async def test_unusable_records_read_from_the_broker_get_their_reason(
    settings: Settings, producer: KafkaProducer
) -> None:
    # The consumer side of dead-lettering: raw topics hand the processor the bytes as
    # written, and the codec names the problem instead of raising inside the stream.
    name = topic_name(Topic.CONVERSATION_FINISHED, settings)
    bad = {
        b"k-utf8": b"\xff\xfe not utf-8",
        b"k-json": b"{not json",
        b"k-type": json.dumps(SAMPLES[SessionPersisted]).encode(),
    }
    for key, value in bad.items():
        producer.send(name, key=key, value=value).get(timeout=30)

    received = await consume(settings, {name: ConversationFinished}, len(bad))
    reasons = {key: decoded.reason for _, key, _, decoded in received}
    assert reasons == {
        b"k-utf8": "invalid_utf8",
        b"k-json": "invalid_json",
        b"k-type": "wrong_type",
    }


@pytest.mark.parametrize(
    ("size", "kept_whole"),
    [
        (999_000, True),  # under the event size limit, undecodable: kept byte for byte
        (3_000_000, False),  # oversized (the broker takes up to 4 MiB): kept in part
    ],
    ids=["invalid-json-just-under-the-limit", "oversized"],
)
async def test_a_large_unusable_message_can_still_be_dead_lettered(
    settings: Settings, size: int, kept_whole: bool
) -> None:
    # Base64 makes a dead letter a third larger than what it carries; it must still fit
    # through the Faust producer and the broker, or the processor fails on the bad input.
    value = b"{" + b"x" * (size - 1)
    rejection = decode(value, ConversationFinished, max_bytes=settings.max_event_bytes)
    assert isinstance(rejection, Rejection)
    source = topic_name(Topic.CONVERSATION_FINISHED, settings)
    event = SimpleNamespace(
        message=SimpleNamespace(topic=source, partition=2, offset=7, key=b"s-1", value=value)
    )
    app = make_app("transport-test", settings)
    try:
        await DeadLetters(app, "transport-test", settings)(
            event,  # type: ignore[arg-type]
            rejection,
        )
        await app.producer.flush()
    finally:
        await app.producer.stop()

    ((key, record, _),) = read_topic(settings, Topic.DEAD_LETTERS, min_count=1)
    letter = DeadLetter.model_validate(record)
    assert key == b"s-1"
    assert (letter.source_topic, letter.partition, letter.offset) == (source, 2, 7)
    assert letter.reason == rejection.reason
    kept = base64.b64decode(letter.value_b64)
    if kept_whole:
        assert kept == value
    else:
        # The whole message stays in its source topic; the letter says where and how much.
        assert value.startswith(kept) and len(kept) < len(value)
        assert f"{len(value)} bytes" in letter.detail
