"""The gate processor's metrics."""

from __future__ import annotations

from schemas.events import GateResult
from services.contract.metrics import MetricSet, counter
from services.gate.external import metric_label, result_label


class GateMetrics(MetricSet):
    gate_results = counter(
        "passk_gate_results_total",
        "Gate results, by gate (exit, state) and result (passed, failed).",
        "gate",
        "result",
    )
    sessions_missing = counter(
        "passk_gate_sessions_missing_total",
        "Trials whose persisted session did not arrive before the deadline.",
    )
    external_checks = counter(
        "passk_external_checks_total",
        "External checks read from conversations, by check and result (passed, failed, "
        "missing). A check the trial's scenario names is labelled external:<id> (ids "
        "come from scenario files, so the label is bounded); every other one is folded "
        "into external:(unnamed).",
        "check",
        "result",
    )
    orphan_sessions = counter(
        "passk_gate_orphan_sessions_total",
        "Persisted sessions expired because their conversation never came.",
    )

    def count(self, result: GateResult) -> None:
        self.gate_results.labels(result.gate, "passed" if result.passed else "failed").inc()
        for check in result.external_checks:
            self.external_checks.labels(metric_label(check), result_label(check)).inc()
