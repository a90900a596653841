"""The verdict processor's metrics."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter


class VerdictMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.trials = Counter(
            "passk_trials_total",
            "Trial verdicts, by scenario and outcome (passed, failed, error).",
            ["scenario", "outcome"],
            registry=registry,
        )
        self.duplicates = Counter(
            "passk_verdict_duplicates_total",
            "Gate results or judge verdicts that arrived after their trial's verdict.",
            registry=registry,
        )
