"""The gate processor's metrics."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter

from schemas.events import GateResult
from services.gate.external import metric_label, result_label


class GateMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.gate_results = Counter(
            "passk_gate_results_total",
            "Gate results, by gate (exit, state) and result (passed, failed).",
            ["gate", "result"],
            registry=registry,
        )
        self.sessions_missing = Counter(
            "passk_gate_sessions_missing_total",
            "Trials whose persisted session did not arrive before the deadline.",
            registry=registry,
        )
        self.external_checks = Counter(
            "passk_external_checks_total",
            "External checks read from conversations, by check and result (passed, failed, "
            "missing). A check the trial's scenario names is labelled external:<id> (ids "
            "come from scenario files, so the label is bounded); every other one is folded "
            "into external:(unnamed).",
            ["check", "result"],
            registry=registry,
        )
        self.orphan_sessions = Counter(
            "passk_gate_orphan_sessions_total",
            "Persisted sessions expired because their conversation never came.",
            registry=registry,
        )

    def count(self, result: GateResult) -> None:
        self.gate_results.labels(result.gate, "passed" if result.passed else "failed").inc()
        for check in result.external_checks:
            self.external_checks.labels(metric_label(check), result_label(check)).inc()
