"""What the continuous auditor exports on its /metrics (services/audit/continuous.py)."""

from __future__ import annotations

from services.contract.metrics import MetricSet, counter, gauge


class AuditMetrics(MetricSet):
    unaccounted = gauge(
        "passk_audit_unaccounted_trials",
        "Trials the last audit found stopped short past their deadlines, by the first stage "
        "they did not reach (a count off with no trial of it missing on its own counts one, "
        "at aggregate_run or aggregate_window). Absent until the first audit ends; kept "
        "as it was when an audit fails.",
        "stage",
    )
    miscounted_scopes = gauge(
        "passk_audit_miscounted_scopes",
        "Aggregate scopes (a run, a window) whose counts differ from their verdicts, as the "
        "last audit found them.",
    )
    trials = gauge("passk_audit_trials", "Trials the last audit read (its period's).")
    in_flight = gauge(
        "passk_audit_in_flight_trials",
        "Trials of the last audit still within their deadlines: not counted as unaccounted.",
    )
    last_clean = gauge(
        "passk_audit_last_clean_timestamp_seconds",
        "When the last audit that found every trial accounted for ended (0: none since the "
        "auditor started).",
    )
    last_run = gauge(
        "passk_audit_last_run_timestamp_seconds",
        "When the last audit ended, clean or not (0: none since the auditor started).",
    )
    duration = gauge("passk_audit_duration_seconds", "How long the last audit took.")
    period = gauge(
        "passk_audit_period_seconds", "How far back each audit reads (PASSK_AUDIT_PERIOD_S)."
    )
    runs = counter(
        "passk_audit_runs_total",
        "Audits by result: clean, unclean, failed (could not read the log, the "
        "projection or the aggregate's table).",
        "result",
    )
