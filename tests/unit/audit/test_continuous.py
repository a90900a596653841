"""The continuous auditor's rounds, on a fake audit and a fresh registry: what each
report, and each failure, leaves in the exported metrics."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from services.audit.continuous import Auditor, unaccounted_by_stage
from services.audit.domain import STAGES, AuditReport, Counts, ScopeMismatch, Unaccounted
from services.audit.metrics import AuditMetrics


def clean(trials: int = 10) -> AuditReport:
    return AuditReport(clean=True, trials=trials, stages={})


def lost(*stages: str, scopes: int = 0, listed: int | None = None) -> AuditReport:
    """A report of trials lost at `stages`, listing the first `listed` of them (all)."""
    by_stage = dict.fromkeys(STAGES, 0)
    for s in stages:
        by_stage[s] += 1
    return AuditReport(
        clean=False,
        trials=10,
        stages={},
        in_flight=2,
        unaccounted_by_stage=by_stage,
        unaccounted=[
            Unaccounted(
                trial_id=f"t{i}" if s != "aggregate_window" else None,
                run_id="r",
                scenario_id="s",
                stopped_at=s,
                detail="",
            )
            for i, s in enumerate(stages[:listed])
        ],  # type: ignore[arg-type]
        scopes=[
            ScopeMismatch(
                scenario_id="s",
                scope="1h",
                run_id=None,
                window_start=0,
                counted=Counts(passed=1),
                expected=Counts(passed=2),
            )
        ]
        * scopes,
    )


class Fake:
    """Hands out the reports given (an exception is raised), then stops the auditor."""

    def __init__(self, *outcomes: AuditReport | Exception) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0
        self.auditor: Auditor | None = None

    def __call__(self) -> AuditReport:
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if not self.outcomes and self.auditor is not None:
            self.auditor.stop.set()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels or None)


def auditor(fake: Fake, registry: CollectorRegistry, now: list[float]) -> Auditor:
    made = Auditor(
        fake, AuditMetrics(registry), interval_s=60, period_s=21600, clock=lambda: now[0]
    )
    fake.auditor = made
    return made


def unaccounted(registry: CollectorRegistry) -> dict[str, float | None]:
    return {s: sample(registry, "passk_audit_unaccounted_trials", stage=s) for s in STAGES}


def test_no_stage_figure_before_the_first_audit_ends() -> None:
    registry = CollectorRegistry()
    auditor(Fake(clean()), registry, [1000.0])
    assert set(unaccounted(registry).values()) == {None}  # unknown, not "0 lost"
    assert sample(registry, "passk_audit_last_clean_timestamp_seconds") == 0
    assert sample(registry, "passk_audit_period_seconds") == 21600
    assert sample(registry, "passk_audit_runs_total", result="failed") == 0


def test_a_clean_audit_sets_every_stage_to_zero_and_the_clean_time() -> None:
    registry, now = CollectorRegistry(), [1000.0]
    a = auditor(Fake(clean(trials=7)), registry, now)
    assert a.round() is not None
    assert unaccounted(registry) == dict.fromkeys(STAGES, 0.0)
    assert sample(registry, "passk_audit_last_clean_timestamp_seconds") == 1000.0
    assert sample(registry, "passk_audit_last_run_timestamp_seconds") == 1000.0
    assert sample(registry, "passk_audit_trials") == 7
    assert sample(registry, "passk_audit_runs_total", result="clean") == 1


def test_losses_are_counted_by_stage_and_the_clean_time_stays() -> None:
    registry, now = CollectorRegistry(), [1000.0]
    a = auditor(
        Fake(clean(), lost("projection", "projection", "gate", "aggregate_window", scopes=1)),
        registry,
        now,
    )
    a.round()
    now[0] = 1060.0
    a.round()
    assert unaccounted(registry) == {
        "gate": 1,
        "judge": 0,
        "verdict": 0,
        "projection": 2,
        "aggregate_run": 0,
        "aggregate_window": 1,
    }
    assert sample(registry, "passk_audit_last_clean_timestamp_seconds") == 1000.0
    assert sample(registry, "passk_audit_last_run_timestamp_seconds") == 1060.0
    assert sample(registry, "passk_audit_miscounted_scopes") == 1
    assert sample(registry, "passk_audit_in_flight_trials") == 2
    assert sample(registry, "passk_audit_runs_total", result="unclean") == 1


def test_a_failed_audit_is_counted_and_keeps_the_last_figures() -> None:
    registry, now = CollectorRegistry(), [1000.0]
    a = auditor(Fake(lost("verdict"), RuntimeError("broker down")), registry, now)
    a.round()
    now[0] = 1060.0
    assert a.round() is None
    assert sample(registry, "passk_audit_unaccounted_trials", stage="verdict") == 1
    assert sample(registry, "passk_audit_last_run_timestamp_seconds") == 1000.0
    assert sample(registry, "passk_audit_runs_total", result="failed") == 1


def test_it_audits_every_interval_until_stopped() -> None:
    registry = CollectorRegistry()
    fake = Fake(clean(), RuntimeError("once"), lost("judge"))
    a = Auditor(fake, AuditMetrics(registry), interval_s=0.01, period_s=60)
    fake.auditor = a
    runner = threading.Thread(target=a.run)
    runner.start()
    runner.join(10)
    assert not runner.is_alive() and fake.calls == 3
    assert sample(registry, "passk_audit_unaccounted_trials", stage="judge") == 1
    assert sample(registry, "passk_audit_runs_total", result="failed") == 1


def test_a_long_audit_is_followed_at_once_a_short_one_an_interval_after_it_began() -> None:
    clock = [0.0]
    waits: list[float] = []
    fake = Fake(clean(), clean(), clean())

    def audit_once() -> AuditReport:
        clock[0] += 90.0 if fake.calls == 0 else 10.0
        return fake()

    a = Auditor(
        audit_once,
        AuditMetrics(CollectorRegistry()),
        interval_s=60,
        period_s=60,
        monotonic=lambda: clock[0],
    )
    fake.auditor = a

    class Stop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout or 0.0)
            return self.is_set()

    a.stop = Stop()
    a.run()
    assert waits[:2] == [0.0, 50.0]


def test_unaccounted_by_stage_names_every_stage() -> None:
    assert unaccounted_by_stage(clean()) == dict.fromkeys(STAGES, 0)


def test_the_gauge_counts_every_lost_trial_not_only_those_the_report_lists() -> None:
    registry = CollectorRegistry()
    auditor(Fake(lost(*["judge"] * 12_000, listed=10_000)), registry, [1.0]).round()
    assert sample(registry, "passk_audit_unaccounted_trials", stage="judge") == 12_000


@pytest.mark.parametrize(
    "name",
    [
        "passk_audit_unaccounted_trials",
        "passk_audit_last_clean_timestamp_seconds",
        "passk_audit_runs_total",
    ],
)
def test_the_names_the_alerts_read_are_exported(name: str) -> None:
    registry = CollectorRegistry()
    auditor(Fake(clean()), registry, [1.0]).round()
    assert f"\n{name}" in "\n" + generate_latest(registry).decode()
