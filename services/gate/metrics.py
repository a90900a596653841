"""The gate processor's metrics."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter


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
        self.orphan_sessions = Counter(
            "passk_gate_orphan_sessions_total",
            "Persisted sessions expired because their conversation never came.",
            registry=registry,
        )
