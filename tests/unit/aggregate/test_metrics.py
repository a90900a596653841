"""The reliability gauges, read from a fresh registry as Prometheus would scrape them."""

from __future__ import annotations

from math import comb

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from scipy.stats import beta

from services.aggregate.domain import Bucket
from services.aggregate.metrics import ReliabilityGauges
from tests.unit.factories import scenario

HOUR = 1_764_496_800  # 2026-11-30T10:00:00Z


def window(
    start: int,
    passed: int,
    failed: int = 0,
    errors: int = 0,
    *,
    scenario_id: str = "s1",
    size: str = "1h",
    k: int = 3,
    invalid: int = 0,
) -> Bucket:
    return Bucket(
        scenario_id=scenario_id,
        k=k,
        passed=passed,
        failed=failed,
        errors=errors,
        invalid=invalid,
        seq=passed + failed + errors + invalid,
        partition=0,
        window=size,
        window_start=start,
        window_end=start + 3600,
    )


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_the_most_recent_window_of_each_size_is_exported(registry: CollectorRegistry) -> None:
    gauges = ReliabilityGauges(registry)
    gauges.set_window(window(HOUR, passed=8, failed=2))
    gauges.set_window(window(HOUR - 3600, passed=1, failed=9))  # older: not shown
    gauges.set_window(window(HOUR - 36000, passed=5, size="1d"))
    at = {"scenario": "s1", "window": "1h"}
    n, c, k = 10, 8, 3
    assert value(registry, "passk_scenario_trials", **at) == n
    assert value(registry, "passk_scenario_pass_hat_k", **at) == pytest.approx(
        comb(c, k) / comb(n, k)
    )
    assert value(registry, "passk_scenario_pass_at_k", **at) == pytest.approx(
        1 - comb(n - c, k) / comb(n, k)
    )
    assert value(registry, "passk_scenario_pass_hat_k_lower", **at) == pytest.approx(
        beta.ppf(0.05, c + 1, n - c + 1) ** k
    )
    assert value(registry, "passk_scenario_pass_hat_k_upper", **at) == pytest.approx(
        beta.ppf(0.95, c + 1, n - c + 1) ** k
    )
    assert value(registry, "passk_scenario_trials", scenario="s1", window="1d") == 5


def test_a_later_window_replaces_the_gauge_and_an_expired_one_is_removed(
    registry: CollectorRegistry,
) -> None:
    gauges = ReliabilityGauges(registry)
    gauges.set_window(window(HOUR, passed=3))
    gauges.set_window(window(HOUR + 3600, passed=1, failed=4))
    assert value(registry, "passk_scenario_trials", scenario="s1", window="1h") == 5
    gauges.remove_window("s1", "1h")
    for name in ("trials", "pass_hat_k", "pass_hat_k_lower", "pass_hat_k_upper", "pass_at_k"):
        assert value(registry, f"passk_scenario_{name}", scenario="s1", window="1h") is None


def test_fewer_than_k_trials_export_no_estimate(registry: CollectorRegistry) -> None:
    gauges = ReliabilityGauges(registry)
    gauges.set_window(window(HOUR, passed=2, k=3))
    assert value(registry, "passk_scenario_trials", scenario="s1", window="1h") == 2
    assert value(registry, "passk_scenario_pass_hat_k", scenario="s1", window="1h") is None
    assert value(registry, "passk_scenario_pass_hat_k_upper", scenario="s1", window="1h") < 1


def test_reset_shows_exactly_what_the_table_holds(registry: CollectorRegistry) -> None:
    gauges = ReliabilityGauges(registry)
    gauges.set_window(window(HOUR, passed=3, scenario_id="gone"))
    gauges.reset_windows([window(HOUR, passed=4, scenario_id="kept")])
    assert value(registry, "passk_scenario_trials", scenario="gone", window="1h") is None
    assert value(registry, "passk_scenario_trials", scenario="kept", window="1h") == 4


def test_alert_targets_come_from_the_scenario_or_the_defaults(registry: CollectorRegistry) -> None:
    gauges = ReliabilityGauges(registry)
    strict = scenario(id="strict", alert={"min_pass_hat_k": 0.95, "min_trials": 20})
    half = scenario(id="half", alert={"min_trials": 5})
    plain = scenario(id="plain")
    gauges.set_targets([strict, half, plain], default_min_pass_hat_k=0.8, default_min_trials=10)
    got = {
        s: (
            value(registry, "passk_scenario_alert_min_pass_hat_k", scenario=s),
            value(registry, "passk_scenario_alert_min_trials", scenario=s),
        )
        for s in ("strict", "half", "plain")
    }
    assert got == {"strict": (0.95, 20), "half": (0.8, 5), "plain": (0.8, 10)}


def test_labels_are_scenario_and_window_only(registry: CollectorRegistry) -> None:
    gauges = ReliabilityGauges(registry)
    gauges.set_window(window(HOUR, passed=3))
    gauges.set_targets([scenario(id="s1")], 0.8, 10)
    for family in registry.collect():
        for sample in family.samples:
            assert set(sample.labels) <= {"scenario", "window"}, sample
    assert b"passk_scenario_pass_hat_k{" in generate_latest(registry)


def test_errors_are_exported_apart_and_left_out_of_the_judged_pass_hat_k(
    registry: CollectorRegistry,
) -> None:
    # A judge outage: 12 trials, 9 could not be judged, the 3 judged ones all passed.
    gauges = ReliabilityGauges(registry)
    gauges.set_window(window(HOUR, passed=3, errors=9))
    at = {"scenario": "s1", "window": "1h"}
    assert value(registry, "passk_scenario_trials", **at) == 12
    assert value(registry, "passk_scenario_errors", **at) == 9
    # strict (what the deploy gate reads): 3 of 12 passed
    assert value(registry, "passk_scenario_pass_hat_k", **at) == pytest.approx(
        comb(3, 3) / comb(12, 3)
    )
    # judged: 3 of 3 passed
    assert value(registry, "passk_scenario_judged_pass_hat_k", **at) == 1.0
    assert value(registry, "passk_scenario_judged_pass_hat_k_upper", **at) == pytest.approx(
        beta.ppf(0.95, 4, 1) ** 3
    )


def test_fewer_than_k_judged_trials_export_no_judged_estimate(
    registry: CollectorRegistry,
) -> None:
    gauges = ReliabilityGauges(registry)
    gauges.set_window(window(HOUR, passed=1, failed=1, errors=10))
    at = {"scenario": "s1", "window": "1h"}
    assert value(registry, "passk_scenario_pass_hat_k", **at) == 0.0
    assert value(registry, "passk_scenario_judged_pass_hat_k", **at) is None
    assert value(registry, "passk_scenario_errors", **at) == 10


def test_the_llm_judge_calls_the_sample_saved_per_window(registry: CollectorRegistry) -> None:
    # 40 trials in the hour, 12 of them in the sample: 28 left out, each saving the calls of
    # the scenario's two LLM judges (its third judge is a regex: it ran on every trial)
    gauges = ReliabilityGauges(registry)
    bucket = window(HOUR, passed=36, failed=4).model_copy(
        update={"n_sampled": 12, "passed_sampled": 10, "errors_sampled": 0}
    )
    gauges.set_window(bucket)
    at = {"scenario": "s1", "window": "1h"}
    assert value(registry, "passk_scenario_llm_judge_calls_saved", **at) is None  # no catalog
    gauges.set_targets(
        [
            scenario(
                id="s1",
                judges=[
                    {"id": "a", "assertion": "A holds."},
                    {"id": "b", "assertion": "B holds."},
                    {"id": "c", "kind": "regex", "pattern": "refund", "must_match": True},
                ],
            )
        ],
        0.8,
        10,
    )
    assert value(registry, "passk_scenario_llm_judge_calls_saved", **at) == (40 - 12) * 2
    assert value(registry, "passk_scenario_sampled_trials", **at) == 12
    # without sampling nothing was saved
    gauges.set_window(window(HOUR + 3600, passed=5))
    assert value(registry, "passk_scenario_llm_judge_calls_saved", **at) == 0


def test_invalid_trials_are_exported_apart_and_out_of_every_figure(
    registry: CollectorRegistry,
) -> None:
    # 14 trials in the hour: 7 passed, 2 failed, 1 error, and 4 the simulated user spoiled
    gauges = ReliabilityGauges(registry)
    gauges.set_window(window(HOUR, passed=7, failed=2, errors=1, invalid=4))
    at = {"scenario": "s1", "window": "1h"}
    n, c, k = 7 + 2 + 1, 7, 3  # the agent's trials: the spoiled ones are not among them
    assert value(registry, "passk_scenario_invalid", **at) == 4
    assert value(registry, "passk_scenario_trials", **at) == n
    assert value(registry, "passk_scenario_errors", **at) == 1
    assert value(registry, "passk_scenario_pass_hat_k", **at) == pytest.approx(
        comb(c, k) / comb(n, k)
    )
    assert value(registry, "passk_scenario_pass_hat_k_upper", **at) == pytest.approx(
        beta.ppf(0.95, c + 1, n - c + 1) ** k
    )
    # judged: errors out too, 7 of 9
    assert value(registry, "passk_scenario_judged_pass_hat_k", **at) == pytest.approx(
        comb(7, 3) / comb(9, 3)
    )
    # a window with none shows 0, not an absent series
    gauges.set_window(window(HOUR, passed=3, size="1d"))
    assert value(registry, "passk_scenario_invalid", scenario="s1", window="1d") == 0
