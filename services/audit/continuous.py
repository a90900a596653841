"""The auditor `make up` runs (`passk worker audit`): `passk audit --since PERIOD` every
interval, its findings exported as metrics for `PasskTrialsUnaccounted`.

Each round audits a bounded recent period (PASSK_AUDIT_PERIOD_S of log time, default six
hours), not the whole log: a week of traffic read every minute would cost more than it
tells. A loss older than the period is `passk audit`'s to find (no `--since`), by hand.
Within the period the audit is the command's: trials still within the pipeline's
deadlines (the grace) are in flight, not unaccounted; run counts are not compared (a run
read in part cannot be), each trial's own landing in its run and windows is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from services.audit.domain import STAGES, AuditReport
from services.audit.metrics import AuditMetrics

log = logging.getLogger("passk.audit")

AuditOnce = Callable[[], AuditReport]


def unaccounted_by_stage(report: AuditReport) -> dict[str, int]:
    """Every stage, with how many trials (and counts off on their own) stopped there: the
    report's full counts, not its list, which holds only the first ones."""
    return {stage: report.unaccounted_by_stage.get(stage, 0) for stage in STAGES}


@dataclass
class Auditor:
    """Runs `audit_once` every `interval_s` until stopped, and exports what it found."""

    audit_once: AuditOnce
    metrics: AuditMetrics
    interval_s: float
    period_s: float
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.metrics.period.set(self.period_s)
        for result in ("clean", "unclean", "failed"):
            self.metrics.runs.labels(result)  # each result's series from 0

    def round(self) -> AuditReport | None:
        """One audit, exported; None when it failed (the gauges keep the last audit's
        figures, and runs_total{result="failed"} counts it)."""
        began = self.monotonic()
        try:
            report = self.audit_once()
        except Exception:  # any failure is logged and counted; the next round retries
            log.exception("audit: the audit failed; retrying in %.0f s", self.interval_s)
            self.metrics.runs.labels("failed").inc()
            self.metrics.duration.set(self.monotonic() - began)
            return None
        ended = self.clock()
        m = self.metrics
        for stage, n in unaccounted_by_stage(report).items():
            m.unaccounted.labels(stage).set(n)
        m.miscounted_scopes.set(len(report.scopes))
        m.trials.set(report.trials)
        m.in_flight.set(report.in_flight)
        m.duration.set(self.monotonic() - began)
        m.last_run.set(ended)
        if report.clean:
            m.last_clean.set(ended)
        m.runs.labels("clean" if report.clean else "unclean").inc()
        if not report.clean:
            by_stage = unaccounted_by_stage(report)
            log.warning(
                "audit: %d unaccounted (%s), %d counts off, of %d trials; `passk audit` lists them",
                sum(by_stage.values()),
                ", ".join(f"{s} {n}" for s, n in by_stage.items() if n),
                len(report.scopes),
                report.trials,
            )
        return report

    def run(self) -> None:
        """Audit every interval (the next one starts an interval after the last one
        started, at once if it took longer) until `stop` is set."""
        while not self.stop.is_set():
            started = self.monotonic()
            self.round()
            self.stop.wait(max(0.0, started + self.interval_s - self.monotonic()))
