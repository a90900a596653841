"""The harness's I/O with the log: which trials of a run it already holds (so the same run
id run again publishes nothing twice), and publishing one trial's events together."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kafka import KafkaConsumer, TopicPartition
from kafka.future import Future

from schemas.events import ConversationFinished, SessionPersisted
from services.contract.codec import Rejection, decode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.delivery import describe
from services.kafka.kafka_client import kafka_client_kwargs
from services.kafka.producer import TrafficProducer

WAIT_SLICE_S = 0.2  # how often a wait for the broker looks whether the run was stopped


def published_trials(run_id: str, settings: Settings) -> set[str]:
    """Trial ids of this run already on the conversation-finished topic (read to the end
    offsets taken at the start; records of other runs are skipped unparsed)."""
    name = topic_name(Topic.CONVERSATION_FINISHED, settings)
    consumer = KafkaConsumer(
        **kafka_client_kwargs(settings),
        group_id=None,
        enable_auto_commit=False,
        max_poll_records=2000,
    )
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


def publisher(
    producer: TrafficProducer, stop_waiting: threading.Event, timeout_s: float | None = None
) -> Callable[[ConversationFinished, SessionPersisted | None], str | None]:
    """Send a trial's events and wait for their acknowledgements: None when they are all
    in the log, else why not. The session goes first, and the conversation only once the
    session is acknowledged: a trial whose conversation is in the log then has its session
    there too, so a re-run, which skips the trials already in the log, never leaves one
    without its session. Each wait ends at `timeout_s` (default: the producer's deadline)
    or as soon as `stop_waiting` is set (a stopped run)."""
    limit = producer.deadline_s if timeout_s is None else timeout_s

    def publish(conversation: ConversationFinished, session: SessionPersisted | None) -> str | None:
        for event in ([session] if session is not None else []) + [conversation]:
            why = acknowledged(producer.send(event, ref=conversation.trial_id), limit, stop_waiting)
            if why is not None:
                return f"{event.type} not delivered: {why}"
        return None

    return publish


def acknowledged(
    future: Future,
    timeout_s: float,
    stop_waiting: threading.Event,
    clock: Callable[[], float] = time.monotonic,
) -> str | None:
    """Wait for one send: None once the broker acknowledged it, else why not."""
    done = threading.Event()
    future.add_both(lambda _result: done.set())
    deadline = clock() + timeout_s
    while not done.wait(WAIT_SLICE_S):
        if stop_waiting.is_set():
            return "the run was stopped before the broker acknowledged it"
        if clock() >= deadline:
            return f"not acknowledged by the broker within {timeout_s:g} s"
    return describe(future.exception) if future.failed() else None
