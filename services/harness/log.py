"""The harness's I/O with the log: which trials of a run it already holds (so the same run
id run again publishes nothing twice), and publishing one trial's events together."""

from __future__ import annotations

from kafka import KafkaConsumer, TopicPartition

from schemas.events import ConversationFinished, SessionPersisted
from services.contract.codec import Rejection, decode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.kafka_client import kafka_client_kwargs
from services.kafka.producer import TrafficProducer

SEND_TIMEOUT_S = 60.0


def published_trials(run_id: str, settings: Settings) -> set[str]:
    """Trial ids of this run already on the conversation-finished topic (read to the end
    offsets taken at the start; records of other runs are skipped unparsed)."""
    name = topic_name(Topic.CONVERSATION_FINISHED, settings)
    consumer = KafkaConsumer(**kafka_client_kwargs(settings), group_id=None,
                             enable_auto_commit=False, max_poll_records=2000)
    found: set[str] = set()
    needle = run_id.encode()
    limits = {"max_bytes": settings.max_event_bytes, "max_depth": settings.max_json_depth}
    try:
        partitions = consumer.partitions_for_topic(name) or set()
        if not partitions:
            raise RuntimeError(f"topic {name} not found (passk topics create?)")
        assigned = [TopicPartition(name, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        end = consumer.end_offsets(assigned)
        remaining = {tp for tp in assigned if end[tp] > consumer.position(tp)}
        while remaining:
            for tp, records in consumer.poll(timeout_ms=1000).items():
                for record in records:
                    if record.offset >= end[tp] or needle not in (record.value or b""):
                        continue
                    event = decode(record.value, ConversationFinished, **limits)
                    if not isinstance(event, Rejection) and event.run_id == run_id:
                        found.add(event.trial_id)
            remaining = {tp for tp in remaining if consumer.position(tp) < end[tp]}
        return found
    finally:
        consumer.close()


def publisher(producer: TrafficProducer, timeout_s: float = SEND_TIMEOUT_S):  # type: ignore[no-untyped-def]
    """Send a trial's events and wait for both acknowledgements: None when both are in the
    log, else why not. The session goes first: its gate join waits for the conversation."""

    def publish(conversation: ConversationFinished,
                session: SessionPersisted | None) -> str | None:
        futures = []
        if session is not None:
            futures.append(producer.send(session))
        futures.append(producer.send(conversation))
        problems = []
        for future in futures:
            try:
                future.get(timeout=timeout_s)
            except Exception as exc:  # the SDK has recorded it; say it here too
                problems.append(f"{type(exc).__name__}: {exc}")
        return "; ".join(problems) or None

    return publish
