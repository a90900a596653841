"""Every send delivered or reported, first sent first; no wait for the broker unbounded."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kafka.future import Future

from services.contract.settings import Settings
from services.kafka import producer as producer_module
from services.kafka.delivery import Ledger, Undelivered
from services.kafka.producer import TrafficProducer, delivery_config


def test_the_report_lists_failed_and_unacknowledged_sends_in_send_order() -> None:
    ledger = Ledger()
    numbers = [ledger.sent(f"line {i}", "t") for i in range(1, 5)]
    ledger.acknowledged(numbers[0])
    ledger.failed(numbers[2], "KafkaTimeoutError: Expiring 1 record(s)")
    ledger.refused("line 5", "u", "SendError: topic u unavailable")
    report = ledger.report("not acknowledged")
    assert report.acked == {"t": 1} and report.delivered == 1
    assert report.undelivered == (
        Undelivered("line 2", "t", "not acknowledged"),
        Undelivered("line 3", "t", "KafkaTimeoutError: Expiring 1 record(s)"),
        Undelivered("line 4", "t", "not acknowledged"),
        Undelivered("line 5", "u", "SendError: topic u unavailable"),
    )
    assert report.first_undelivered is not None and report.first_undelivered.ref == "line 2"


def test_waiting_for_the_sends_ends_at_its_deadline_or_when_all_are_in() -> None:
    ledger = Ledger()
    number = ledger.sent("line 1", "t")
    started = time.monotonic()
    assert ledger.wait_settled(0.3) is False
    assert 0.25 < time.monotonic() - started < 2
    threading.Timer(0.2, ledger.acknowledged, (number,)).start()
    assert ledger.wait_settled(30) is True
    assert time.monotonic() - started < 5


def test_given_up_sends_stay_undelivered_whatever_the_client_says_later() -> None:
    ledger = Ledger()
    number = ledger.sent("trial 1", "t")
    ledger.give_up("not acknowledged within 0 s")
    ledger.failed(number, "IllegalStateError: Producer is closed forcefully.")
    ledger.acknowledged(number)
    assert ledger.report("-").undelivered == (
        Undelivered("trial 1", "t", "not acknowledged within 0 s"),
    )
    assert ledger.wait_settled(0) is True


def test_the_delivery_timeout_bounds_a_record_and_keeps_order_without_idempotence() -> None:
    config = delivery_config(20.0, linger_ms=5)
    assert config["delivery_timeout_ms"] == 20_000
    # kafka-python refuses a delivery timeout not above request timeout plus linger
    assert config["request_timeout_ms"] + 5 < config["delivery_timeout_ms"]
    assert config["enable_idempotence"] is False
    assert config["max_in_flight_requests_per_connection"] == 1
    assert delivery_config(120.0, 5)["request_timeout_ms"] == 30_000


class StuckClient:
    """A KafkaProducer whose broker never answers (kafka-python 3.0.12's idempotent
    producer after an expired batch behaved so for ever)."""

    instances: list[StuckClient] = []

    def __init__(self, **config: Any) -> None:
        self.config = config
        self.futures: list[Future] = []
        self.forced = threading.Event()
        self.closed_with: list[float | None] = []
        self._sender = self
        StuckClient.instances.append(self)

    def send(self, topic: str, value: bytes, key: bytes | None) -> Future:
        self.futures.append(Future())
        return self.futures[-1]

    # the I/O thread's side, as TrafficProducer uses it
    def force_close(self) -> None:
        self.forced.set()
        for future in self.futures:  # what kafka-python does to what it still held
            future.failure(RuntimeError("Producer is closed forcefully."))

    def join(self, timeout: float | None = None) -> None:
        pass

    def is_alive(self) -> bool:
        return False

    def close(self, timeout: float | None = None) -> None:
        self.closed_with.append(timeout)


@pytest.fixture
def stuck(monkeypatch: pytest.MonkeyPatch) -> type[StuckClient]:
    StuckClient.instances.clear()
    monkeypatch.setattr(producer_module, "KafkaProducer", StuckClient)
    return StuckClient


def test_close_gives_up_on_a_broker_that_never_answers(stuck: type[StuckClient]) -> None:
    settings = Settings(PASSK_PRODUCER_DELIVERY_TIMEOUT_S=5)  # type: ignore[call-arg]
    producer = TrafficProducer(settings)
    assert producer.deadline_s == 5 + producer_module.DEADLINE_GRACE_S
    [client] = stuck.instances
    assert client.config["delivery_timeout_ms"] == 5000
    producer.send_raw("t", b"k", b"v", ref="line 1")
    producer.send_raw("t", b"k", b"v", ref="line 2")
    started = time.monotonic()
    assert producer.settle(0.2) is False
    producer.close(timeout_s=0.2)
    assert time.monotonic() - started < 3  # today: for ever (flush without a deadline)
    assert client.forced.is_set() and client.closed_with
    report = producer.report()
    assert [u.ref for u in report.undelivered] == ["line 1", "line 2"]
    assert {u.why for u in report.undelivered} == {"not acknowledged by the broker within 0.2 s"}


def test_a_sigint_while_closing_still_closes_and_reports(stuck: type[StuckClient]) -> None:
    producer = TrafficProducer(Settings())
    producer.send_raw("t", b"k", b"v", ref="trial 1")

    def interrupted(timeout_s: float) -> bool:
        raise KeyboardInterrupt

    producer._ledger.wait_settled = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        producer.close()
    assert stuck.instances[0].forced.is_set()
    assert [u.ref for u in producer.report().undelivered] == ["trial 1"]
