"""The continuous auditor's round on the real broker (services/audit/app.py
`make_auditor`): its period bounds what it reads, its grace keeps trials in flight out
of the alert's gauge, and what it finds lands in a fresh registry."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from kafka import KafkaProducer
from prometheus_client import CollectorRegistry

from schemas.events import ConversationFinished
from services.audit.app import make_auditor
from services.audit.domain import AuditReport
from services.audit.settings import AuditSettings
from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.kafka_client import kafka_client_kwargs
from tests.support import wait_for


class NoTable:
    """An aggregate that has counted nothing (no trial here gets that far)."""

    def trial(self, scenario_id: str, trial_id: str) -> None:
        return None

    def scopes(self) -> Iterable[tuple[str, str, int, int, int]]:
        return ()


def finished(trial_id: str) -> ConversationFinished:
    return ConversationFinished(
        event_id=f"cf-{trial_id}",
        run_id="r",
        scenario_id="sc",
        trial_id=trial_id,
        session_id=f"s-{trial_id}",
        exit_reason="product_closed",
        transcript=[],
    )


def send(settings: Settings, event: ConversationFinished) -> float:
    """Send one event; when the log took it (the broker's time: topics use LogAppendTime)."""
    producer = KafkaProducer(**kafka_client_kwargs(settings), acks="all")
    try:
        sent = producer.send(
            topic_name(Topic.CONVERSATION_FINISHED, settings),
            key=event.session_id.encode(),
            value=encode(event),
        )
        return float(sent.get(timeout=30).timestamp) / 1000
    finally:
        producer.close()


def gauge(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels or None)


def test_a_round_reads_its_period_and_counts_only_trials_past_their_grace(
    settings: Settings,
) -> None:
    # Two trials the log took three seconds apart; neither graded.
    old = send(settings, finished("old"))
    wait_for(lambda: time.time() > old + 3, timeout=10, what="three seconds on the clock")
    new = send(settings, finished("new"))
    assert new >= old + 3

    def round_with(period_s: float, grace_s: float) -> tuple[CollectorRegistry, AuditReport]:
        registry = CollectorRegistry()
        audit_settings = AuditSettings(
            PASSK_AUDIT_PERIOD_S=str(period_s),  # type: ignore[call-arg]
            PASSK_AUDIT_GRACE_S=str(grace_s),
        )
        report = make_auditor(
            settings, audit_settings, lambda _settings, _scratch: NoTable(), registry
        ).round()
        assert report is not None
        return registry, report

    # A period that began between the two reads the new trial only; within a ten-minute
    # grace it is in flight: nothing unaccounted, and the audit is clean.
    registry, report = round_with(time.time() - old - 1.5, 600)
    assert (report.trials, report.in_flight) == (1, 1)
    assert gauge(registry, "passk_audit_unaccounted_trials", stage="gate") == 0
    assert gauge(registry, "passk_audit_last_clean_timestamp_seconds") >= new

    # With no grace it is lost at the gate, and the clean time stays unset.
    registry, report = round_with(time.time() - old - 1.5, 0)
    assert (report.trials, report.in_flight) == (1, 0)
    assert gauge(registry, "passk_audit_unaccounted_trials", stage="gate") == 1
    assert gauge(registry, "passk_audit_last_clean_timestamp_seconds") == 0
    assert gauge(registry, "passk_audit_runs_total", result="unclean") == 1

    # A period reaching back past both reads both.
    registry, report = round_with(3600, 0)
    assert report.trials == 2
    assert gauge(registry, "passk_audit_unaccounted_trials", stage="gate") == 2


def test_a_round_that_cannot_read_is_counted_failed(settings: Settings) -> None:
    registry = CollectorRegistry()

    def broken(_settings: Settings, _scratch: Path) -> NoTable:
        raise RuntimeError("the aggregate's changelog could not be read")

    auditor = make_auditor(settings, AuditSettings(), broken, registry)
    assert auditor.round() is None
    assert gauge(registry, "passk_audit_runs_total", result="failed") == 1
    assert gauge(registry, "passk_audit_unaccounted_trials", stage="gate") is None
