"""The verdict processor's metrics.

The per-scenario performance histograms are observed here, once per trial verdict, and
not where the conversation arrives: a repeated ConversationFinished is dropped before
its verdict, so every trial is observed exactly once. Tracked, never gating.
"""

from __future__ import annotations

from collections.abc import Iterable

from schemas.events import TrialMetrics, TrialVerdict
from services.contract.metrics import MetricSet, counter, histogram

TOKEN_BUCKETS = (100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000)
TURN_BUCKETS = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1_200, 1_800, 3_600)
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)


class VerdictMetrics(MetricSet):
    trials = counter(
        "passk_trials_total",
        "Trial verdicts, by scenario and outcome (passed, failed, error, invalid: "
        "a check of the simulated user failed).",
        "scenario",
        "outcome",
    )
    regrades = counter(
        "passk_trial_regrades_total",
        "Re-graded trial verdicts (attempt 2 and up), by scenario and new outcome; "
        "passk_trials_total counts each trial once, with its first verdict.",
        "scenario",
        "outcome",
    )
    duplicates = counter(
        "passk_verdict_duplicates_total",
        "Gate results or judge verdicts that arrived after their trial's verdict.",
    )
    tokens = histogram(
        "passk_trial_tokens",
        "Agent tokens per trial, by scenario and kind (input, output), as reported.",
        "scenario",
        "kind",
        buckets=TOKEN_BUCKETS,
    )
    turns = histogram(
        "passk_trial_turns",
        "Turns per trial, by scenario, as reported.",
        "scenario",
        buckets=TURN_BUCKETS,
    )
    duration = histogram(
        "passk_trial_duration_seconds",
        "Conversation duration per trial, by scenario, as reported.",
        "scenario",
        buckets=DURATION_BUCKETS,
    )
    agent_latency = histogram(
        "passk_agent_latency_seconds",
        "The agent's reported response latency per trial, by scenario.",
        "scenario",
        buckets=LATENCY_BUCKETS,
    )

    def known_scenarios(self, scenarios: Iterable[str]) -> None:
        """Create every (scenario, outcome) series at 0, so an alert's increase() sees the
        first trials of a scenario too (a series first scraped at its final value shows none)."""
        for scenario in scenarios:
            for outcome in ("passed", "failed", "error", "invalid"):
                self.trials.labels(scenario, outcome)

    def count(self, verdict: TrialVerdict) -> None:
        """A trial is counted, and its figures observed, once: with its first verdict. A
        re-grade is counted apart (counters cannot move a count; the aggregate's gauges
        are the figures a re-grade supersedes)."""
        if verdict.attempt > 1:
            self.regrades.labels(verdict.scenario_id, verdict.outcome).inc()
            return
        self.trials.labels(verdict.scenario_id, verdict.outcome).inc()
        self.observe_trial(verdict.scenario_id, verdict.metrics)

    def observe_trial(self, scenario: str, figures: TrialMetrics | None) -> None:
        """A trial's reported figures; the ones a producer left out are not observed."""
        if figures is None:
            return
        if figures.input_tokens is not None:
            self.tokens.labels(scenario, "input").observe(figures.input_tokens)
        if figures.output_tokens is not None:
            self.tokens.labels(scenario, "output").observe(figures.output_tokens)
        if figures.turns is not None:
            self.turns.labels(scenario).observe(figures.turns)
        if figures.duration_ms is not None:
            self.duration.labels(scenario).observe(figures.duration_ms / 1000)
        if figures.latency_ms is not None:
            self.agent_latency.labels(scenario).observe(figures.latency_ms / 1000)
