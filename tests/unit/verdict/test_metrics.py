"""Per-scenario performance histograms: observed once per trial, only what was reported."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from schemas.events import TrialMetrics
from services.verdict.metrics import VerdictMetrics


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_a_trials_figures_land_in_its_scenarios_histograms_in_base_units() -> None:
    registry = CollectorRegistry()
    metrics = VerdictMetrics(registry)
    metrics.observe_trial(
        "checkout",
        TrialMetrics(
            input_tokens=1200, output_tokens=90, turns=6, duration_ms=42_000, latency_ms=850
        ),
    )
    metrics.observe_trial("checkout", TrialMetrics(turns=10))
    assert sample(registry, "passk_trial_tokens_sum", scenario="checkout", kind="input") == 1200
    assert sample(registry, "passk_trial_tokens_sum", scenario="checkout", kind="output") == 90
    assert sample(registry, "passk_trial_turns_count", scenario="checkout") == 2
    assert sample(registry, "passk_trial_turns_sum", scenario="checkout") == 16
    assert sample(registry, "passk_trial_duration_seconds_sum", scenario="checkout") == 42
    # 6 turns fall in the bucket up to 6, not in the one up to 4
    assert sample(registry, "passk_trial_turns_bucket", scenario="checkout", le="4.0") == 0
    assert sample(registry, "passk_trial_turns_bucket", scenario="checkout", le="6.0") == 1
    assert sample(registry, "passk_agent_latency_seconds_sum", scenario="checkout") == 0.85
    # the second trial reported no duration: one observation, not a zero
    assert sample(registry, "passk_trial_duration_seconds_count", scenario="checkout") == 1


def test_a_trial_without_figures_is_not_observed() -> None:
    registry = CollectorRegistry()
    VerdictMetrics(registry).observe_trial("refund", None)
    assert sample(registry, "passk_trial_turns_count", scenario="refund") is None


def test_a_trial_is_counted_once_and_its_regrade_apart() -> None:
    from schemas.events import TrialVerdict

    registry = CollectorRegistry()
    metrics = VerdictMetrics(registry)
    first = TrialVerdict(
        event_id="verdict:t",
        trial_id="t",
        run_id="r",
        scenario_id="checkout",
        scenario_version="v",
        session_id="s",
        k=3,
        outcome="error",
        metrics=TrialMetrics(turns=6),
    )
    metrics.count(first)
    metrics.count(first.model_copy(update={"attempt": 2, "outcome": "passed"}))
    assert sample(registry, "passk_trials_total", scenario="checkout", outcome="error") == 1
    assert sample(registry, "passk_trials_total", scenario="checkout", outcome="passed") is None
    assert (
        sample(registry, "passk_trial_regrades_total", scenario="checkout", outcome="passed") == 1
    )
    assert sample(registry, "passk_trial_turns_count", scenario="checkout") == 1


def test_known_scenarios_have_every_outcome_series_at_zero() -> None:
    from prometheus_client import CollectorRegistry

    from services.verdict.metrics import VerdictMetrics

    registry = CollectorRegistry()
    VerdictMetrics(registry).known_scenarios(["s1"])
    for outcome in ("passed", "failed", "error", "invalid"):
        assert (
            registry.get_sample_value("passk_trials_total", {"scenario": "s1", "outcome": outcome})
            == 0.0
        )


def test_an_invalid_trial_is_counted_under_its_own_outcome() -> None:
    """A trial a simulated user spoiled is neither passed, failed nor error in the counter."""
    from prometheus_client import generate_latest

    from schemas.events import TrialVerdict

    registry = CollectorRegistry()
    metrics = VerdictMetrics(registry)
    outcomes = ["passed", "invalid", "failed", "invalid", "invalid"]
    for i, outcome in enumerate(outcomes):
        metrics.count(
            TrialVerdict(
                event_id=f"verdict:t{i}",
                trial_id=f"t{i}",
                run_id="r",
                scenario_id="checkout",
                scenario_version="v",
                session_id=f"s{i}",
                k=3,
                outcome=outcome,  # type: ignore[arg-type]
            )
        )
    for outcome in ("passed", "failed", "invalid"):
        assert sample(
            registry, "passk_trials_total", scenario="checkout", outcome=outcome
        ) == outcomes.count(outcome)
    assert sample(registry, "passk_trials_total", scenario="checkout", outcome="error") is None
    help_line = next(
        line
        for line in generate_latest(registry).decode().splitlines()
        if line.startswith("# HELP passk_trials_total ")
    )
    assert "invalid" in help_line
