"""Finding trials' input events in the log: only the partitions their session ids hash to
(producers key both input topics by session_id with Kafka's default partitioner), read
from the first retained offset to the end offsets taken at the start."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kafka import KafkaConsumer, TopicPartition

from schemas.events import ConversationFinished, SessionPersisted
from services.contract.codec import Rejection, decode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.kafka_client import kafka_client_kwargs
from services.kafka.scan import partition_of
from services.regrade.plan import FoundInputs, Target

Progress = Callable[[int, int], None]  # (records read so far, records to read)


def find_inputs(
    wanted: Iterable[Target], settings: Settings, *, progress: Progress | None = None
) -> FoundInputs:
    wanted = list(wanted)
    trials = {t.identity.trial_id for t in wanted}
    sessions = {t.identity.session_id for t in wanted}
    keys = {s.encode() for s in sessions}
    found = FoundInputs({}, {})
    if not wanted:
        return found
    conversation_topic = topic_name(Topic.CONVERSATION_FINISHED, settings)
    session_topic = topic_name(Topic.SESSION_PERSISTED, settings)
    consumer = KafkaConsumer(
        **kafka_client_kwargs(settings),
        group_id=None,
        enable_auto_commit=False,
        max_poll_records=1000,
    )
    try:
        assigned = []
        for name in (conversation_topic, session_topic):
            count = len(consumer.partitions_for_topic(name) or ())
            if not count:
                raise RuntimeError(f"topic {name} not found (passk topics create?)")
            assigned += [
                TopicPartition(name, p) for p in sorted({partition_of(s, count) for s in sessions})
            ]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        start = consumer.beginning_offsets(assigned)
        end = consumer.end_offsets(assigned)
        total, done = sum(end[tp] - start[tp] for tp in assigned), 0
        remaining = {tp for tp in assigned if end[tp] > start[tp]}
        limits = {"max_bytes": settings.max_event_bytes, "max_depth": settings.max_json_depth}
        while remaining:
            for tp, records in consumer.poll(timeout_ms=1000).items():
                for record in records:
                    if record.offset >= end[tp]:
                        continue
                    done += 1
                    if record.key not in keys:
                        continue
                    if tp.topic == conversation_topic:
                        conv = decode(record.value, ConversationFinished, **limits)
                        if not isinstance(conv, Rejection) and conv.trial_id in trials:
                            found.conversations[conv.trial_id] = conv
                    else:
                        sess = decode(record.value, SessionPersisted, **limits)
                        if not isinstance(sess, Rejection):
                            found.sessions[sess.session_id] = sess
            remaining = {tp for tp in remaining if consumer.position(tp) < end[tp]}
            if progress:
                progress(done, total)
        return found
    finally:
        consumer.close()
