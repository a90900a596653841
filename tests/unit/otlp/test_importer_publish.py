"""`passk import otel` publishing: every trial delivered or named, SIGINT with a summary."""

from __future__ import annotations

from typing import Any

from schemas.events import ConversationFinished, SessionPersisted
from services.kafka.delivery import DeliveryReport, Ledger
from services.otlp.importer import ImportPlan, publish_plan
from services.otlp.mapping import Taken


def taken(n: int, session: bool = True) -> Taken:
    sid = f"s{n}"
    conversation = ConversationFinished(
        event_id=f"otel:{n}:conversation",
        run_id="r",
        scenario_id="sc",
        trial_id=f"t{n}",
        session_id=sid,
        exit_reason="product_closed",
        transcript=[],
    )
    persisted = SessionPersisted(event_id=f"otel:{n}:session", session_id=sid, state={})
    return Taken(f"{n:032x}", conversation, persisted if session else None)


class Sender:
    """Acknowledges every event but those of `silent` trials (never answered)."""

    def __init__(self, silent: set[str] | None = None, interrupt_at: str = "") -> None:
        self.ledger, self.silent, self.interrupt_at = Ledger(), silent or set(), interrupt_at
        self.sent: list[str] = []
        self.settled: list[float | None] = []

    def send(self, event: Any, *, ref: str | None = None) -> None:
        assert ref is not None
        if ref == self.interrupt_at:
            raise KeyboardInterrupt
        self.sent.append(event.event_id)
        number = self.ledger.sent(ref, event.type)
        if ref not in self.silent:
            self.ledger.acknowledged(number)

    def settle(self, timeout_s: float | None = None) -> bool:
        self.settled.append(timeout_s)
        return self.ledger.waiting == 0

    def report(self) -> DeliveryReport:
        return self.ledger.report("not acknowledged by the broker")


def test_trials_not_delivered_are_named_once_first_sent_first() -> None:
    plan = ImportPlan(taken=[taken(1), taken(2, session=False), taken(3), taken(4)])
    sender = Sender(silent={"t3", "t2"})
    out = publish_plan(plan, sender, settle_timeout_s=5)
    assert sender.settled == [5]
    assert out.undelivered == ["t2", "t3"] and out.acknowledged == 4
    assert out.reasons["t3"] == "not acknowledged by the broker" and not out.interrupted


def test_sigint_stops_sending_and_reports_what_was_sent() -> None:
    plan = ImportPlan(taken=[taken(1), taken(2), taken(3)])
    sender = Sender(silent={"t2"}, interrupt_at="t3")
    out = publish_plan(plan, sender, stop_grace_s=1.5)
    assert out.interrupted and sender.settled == [1.5]
    assert sender.sent == [
        "otel:1:conversation",
        "otel:1:session",
        "otel:2:conversation",
        "otel:2:session",
    ]
    assert out.acknowledged == 2 and out.undelivered == ["t2"]
