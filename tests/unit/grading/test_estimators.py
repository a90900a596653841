"""pass@k and pass^k: a table, checked against brute force over every k-subset of the trials."""

from __future__ import annotations

from itertools import combinations
from math import comb

import numpy as np
import pytest

from services.grading.estimators import (
    ReliabilityTally,
    pass_at_k,
    pass_hat_k,
    pass_hat_k_interval,
)


def brute_force(outcomes: list[bool], k: int) -> tuple[float, float]:
    """Draw every k-subset of the observed trials: the share with any pass, with all passes."""
    subsets = list(combinations(outcomes, k))
    any_passed = sum(any(s) for s in subsets) / len(subsets)
    all_passed = sum(all(s) for s in subsets) / len(subsets)
    return any_passed, all_passed


def trials(n: int, c: int) -> list[bool]:
    return [True] * c + [False] * (n - c)


TABLE: list[tuple[int, int, int, float | None, float | None]] = [
    # n, c, k, pass@k, pass^k
    (0, 0, 3, None, None),  # nothing observed yet
    (2, 2, 3, None, None),  # every trial passed, but fewer than k: insufficient
    (1, 0, 1, 0.0, 0.0),
    (1, 1, 1, 1.0, 1.0),
    (3, 3, 3, 1.0, 1.0),  # n == k: pass^k is "all passed"
    (3, 2, 3, 1.0, 0.0),  # ... and pass@k is "any passed"
    (3, 1, 3, 1.0, 0.0),
    (3, 0, 3, 0.0, 0.0),
    (4, 3, 3, 1.0, 0.25),  # C(3,3)/C(4,3)
    (5, 4, 3, 1.0, 0.4),  # C(4,3)/C(5,3) = 4/10
    (5, 1, 3, 0.6, 0.0),  # 1 - C(4,3)/C(5,3) = 1 - 4/10
    (6, 3, 3, 0.95, 0.05),  # 1 - 1/20, 1/20
    (10, 9, 3, 1.0, 0.7),  # C(9,3)/C(10,3) = 84/120
    (10, 1, 1, 0.1, 0.1),  # k = 1: both are the pass rate
    (20, 10, 5, 1 - comb(10, 5) / comb(20, 5), comb(10, 5) / comb(20, 5)),
]


@pytest.mark.parametrize(("n", "c", "k", "at", "hat"), TABLE)
def test_estimator_table(n: int, c: int, k: int, at: float | None, hat: float | None) -> None:
    if at is None:
        assert pass_at_k(n, c, k) is None
        assert pass_hat_k(n, c, k) is None
    else:
        assert pass_at_k(n, c, k) == pytest.approx(at)
        assert pass_hat_k(n, c, k) == pytest.approx(hat)


@pytest.mark.parametrize(("n", "k"), [(n, k) for n in range(1, 9) for k in range(1, n + 1)])
def test_matches_brute_force_over_every_k_subset(n: int, k: int) -> None:
    for c in range(n + 1):
        any_passed, all_passed = brute_force(trials(n, c), k)
        assert pass_at_k(n, c, k) == pytest.approx(any_passed), (n, c, k)
        assert pass_hat_k(n, c, k) == pytest.approx(all_passed), (n, c, k)


def test_order_of_outcomes_does_not_matter_to_brute_force() -> None:
    # The estimators see only counts; the brute force sees the sequence, so check both agree
    # on an interleaved sequence too.
    outcomes = [True, False, True, True, False, True, True]
    any_passed, all_passed = brute_force(outcomes, 3)
    assert pass_at_k(7, 5, 3) == pytest.approx(any_passed)
    assert pass_hat_k(7, 5, 3) == pytest.approx(all_passed)


def binomial(n: int, c: int, p: float) -> float:
    return comb(n, c) * p**c * (1 - p) ** (n - c)


@pytest.mark.parametrize("n", [3, 5, 10, 25])
def test_a_per_trial_pass_rate_of_90_percent_gives_pass_hat_3_of_0_729(n: int) -> None:
    # METHOD.md: an agent that passes each trial 90% of the time passes 3 in a row 0.9^3 of
    # the time. Averaged over how many of n trials pass, the estimator gives exactly that.
    p, k = 0.9, 3
    expected_hat = sum(binomial(n, c, p) * pass_hat_k(n, c, k) for c in range(n + 1))
    expected_at = sum(binomial(n, c, p) * pass_at_k(n, c, k) for c in range(n + 1))
    assert expected_hat == pytest.approx(0.729)
    assert expected_at == pytest.approx(1 - 0.1**3)


def test_a_large_run_at_90_percent_reads_close_to_0_729() -> None:
    assert pass_hat_k(1000, 900, 3) == pytest.approx(0.729, abs=0.002)


@pytest.mark.parametrize(
    ("n", "c", "k"),
    [(3, 4, 3), (3, -1, 3), (-1, 0, 3), (3, 3, 0), (3, 3, -2)],
)
def test_impossible_counts_raise(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_hat_k(n, c, k)


# ----------------------------------------------------------------- the tally


def tally(k: int, *outcomes: str) -> ReliabilityTally:
    t = ReliabilityTally(k=k)
    for outcome in outcomes:
        t.add(outcome)
    return t


def test_an_empty_tally_has_not_passed() -> None:
    t = ReliabilityTally(k=3)
    assert (t.n, t.passed, t.failed, t.errors) == (0, 0, 0, 0)
    assert t.insufficient
    assert not t.scenario_passed
    assert t.pass_at_k is None and t.pass_hat_k is None


def test_errors_count_in_n_never_in_c() -> None:
    t = tally(3, "passed", "passed", "error")
    assert (t.n, t.passed, t.failed, t.errors) == (3, 2, 0, 1)
    assert t.pass_hat_k == 0.0
    assert t.pass_at_k == 1.0
    assert not t.scenario_passed


def test_errors_alone_never_pass() -> None:
    t = tally(3, "error", "error", "error")
    assert t.pass_at_k == 0.0 and t.pass_hat_k == 0.0
    assert not t.scenario_passed


@pytest.mark.parametrize(
    ("k", "outcomes", "passed", "insufficient"),
    [
        (3, ["passed"] * 3, True, False),
        (3, ["passed"] * 2, False, True),  # every trial passed, but too few
        (3, ["passed"] * 5, True, False),
        (3, ["passed"] * 4 + ["failed"], False, False),
        (1, ["failed"], False, False),
        (1, ["passed"], True, False),
    ],
)
def test_a_scenario_passes_only_with_k_trials_all_passed(
    k: int, outcomes: list[str], passed: bool, insufficient: bool
) -> None:
    t = tally(k, *outcomes)
    assert t.scenario_passed is passed
    assert t.insufficient is insufficient
    if passed:
        assert t.pass_hat_k == 1.0


def test_tally_agrees_with_the_estimators() -> None:
    t = tally(3, "passed", "failed", "passed", "passed", "error", "passed")
    assert (t.n, t.passed) == (6, 4)
    assert t.pass_at_k == pass_at_k(6, 4, 3)
    assert t.pass_hat_k == pass_hat_k(6, 4, 3)


def test_an_unknown_outcome_raises_and_counts_nothing() -> None:
    t = tally(3, "passed")
    with pytest.raises(ValueError, match="unknown outcome 'flaky'"):
        t.add("flaky")
    assert t.n == 1


# The credible interval of pass^k. Expected values come from outside the code under test:
# closed forms of the uniform-prior Beta posterior, and a seeded Monte Carlo of p**k.
class TestPassHatKInterval:
    def test_all_passed_has_closed_form_quantiles(self) -> None:
        # c == n: posterior Beta(n+1, 1), CDF p**(n+1), so the q-quantile of p is q**(1/(n+1)).
        n, k = 9, 3
        lower, upper = pass_hat_k_interval(n, n, k)
        assert lower == pytest.approx((0.05 ** (1 / (n + 1))) ** k, rel=1e-9)
        assert upper == pytest.approx((0.95 ** (1 / (n + 1))) ** k, rel=1e-9)

    def test_none_passed_has_closed_form_quantiles(self) -> None:
        # c == 0: posterior Beta(1, n+1), CDF 1-(1-p)**(n+1), quantile 1-(1-q)**(1/(n+1)).
        n, k = 4, 2
        lower, upper = pass_hat_k_interval(n, 0, k)
        assert lower == pytest.approx((1 - 0.95 ** (1 / (n + 1))) ** k, rel=1e-9)
        assert upper == pytest.approx((1 - 0.05 ** (1 / (n + 1))) ** k, rel=1e-9)

    @pytest.mark.parametrize(("n", "c", "k"), [(5, 4, 3), (20, 15, 5), (3, 1, 3)])
    def test_matches_monte_carlo(self, n: int, c: int, k: int) -> None:
        # 200,000 draws from the posterior, by numpy's generator (Python's betavariate in
        # a loop took seconds)
        draws = np.sort(np.random.default_rng(1234).beta(c + 1, n - c + 1, 200_000) ** k)
        lower, upper = pass_hat_k_interval(n, c, k)
        assert lower == pytest.approx(draws[int(0.05 * len(draws))], abs=0.005)
        assert upper == pytest.approx(draws[int(0.95 * len(draws))], abs=0.005)

    def test_more_trials_narrow_the_interval_around_the_same_rate(self) -> None:
        few = pass_hat_k_interval(5, 4, 3)
        many = pass_hat_k_interval(500, 400, 3)
        assert many[1] - many[0] < few[1] - few[0]
        assert many[0] < 0.8**3 < many[1]

    def test_no_trials_gives_the_prior(self) -> None:
        lower, upper = pass_hat_k_interval(0, 0, 1)
        assert lower == pytest.approx(0.05) and upper == pytest.approx(0.95)

    @pytest.mark.parametrize("mass", [0.0, 1.0, -0.1, 1.5])
    def test_refuses_a_mass_outside_0_1(self, mass: float) -> None:
        with pytest.raises(ValueError):
            pass_hat_k_interval(5, 3, 3, mass)
