"""Publishing one trial: the session first, the conversation only once the session is in
the log, every wait bounded."""

from __future__ import annotations

import threading
import time
from typing import Any

from kafka.errors import KafkaTimeoutError
from kafka.future import Future

from schemas.events import ConversationFinished, SessionPersisted
from services.harness.log import acknowledged, publisher

CONV = ConversationFinished(
    event_id="cf",
    run_id="r",
    scenario_id="s",
    trial_id="r:s:001",
    session_id="x",
    exit_reason="product_closed",
    transcript=[],
)
SESS = SessionPersisted(event_id="sp", session_id="x", state={})


class Producer:
    """Acknowledges what `answer` says: "ok", "fail", or None (never answers)."""

    def __init__(self, answers: dict[str, str | None]) -> None:
        self.answers, self.sent = answers, []
        self.deadline_s = 0.5

    def send(self, event: Any, *, ref: str | None = None) -> Future:
        self.sent.append((event.type, ref))
        answer = self.answers[event.type]
        if answer == "ok":
            return Future().success(None)
        if answer == "fail":
            return Future().failure(KafkaTimeoutError("Expiring 1 record(s)"))
        return Future()


def test_the_conversation_goes_only_once_the_session_is_acknowledged() -> None:
    producer = Producer({"session_persisted": None, "conversation_finished": "ok"})
    publish = publisher(producer, threading.Event())  # type: ignore[arg-type]
    started = time.monotonic()
    why = publish(CONV, SESS)
    assert time.monotonic() - started < 3  # the producer's deadline, not for ever
    assert why == "session_persisted not delivered: not acknowledged by the broker within 0.5 s"
    assert producer.sent == [("session_persisted", "r:s:001")]  # no conversation without it


def test_both_acknowledged_is_published_and_a_failure_says_why() -> None:
    ok = Producer({"session_persisted": "ok", "conversation_finished": "ok"})
    assert publisher(ok, threading.Event())(CONV, SESS) is None  # type: ignore[arg-type]
    assert [t for t, _ in ok.sent] == ["session_persisted", "conversation_finished"]
    failed = Producer({"conversation_finished": "fail"})
    why = publisher(failed, threading.Event())(CONV, None)  # type: ignore[arg-type]
    assert why == "conversation_finished not delivered: KafkaTimeoutError: Expiring 1 record(s)"


def test_stop_waiting_ends_the_wait_at_once() -> None:
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    why = acknowledged(Future(), 60, stop)
    assert why == "the run was stopped before the broker acknowledged it"
    assert time.monotonic() - started < 2
