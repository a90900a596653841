"""The adaptive allocation rule as tables. Expected bounds come from closed forms of the
Beta quantiles (c = n: Beta(n+1, 1) has CDF x**(n+1); c = 0: Beta(1, n+1) has CDF
1 - (1-x)**(n+1)) or from scipy.stats, never from the code under test."""

from __future__ import annotations

import pytest
from scipy.stats import beta

from services.grading.adaptive import (
    ABOVE,
    BELOW,
    UNDECIDED,
    Observed,
    decide,
    fixed_plan_trials,
    next_round,
    standing,
)


def all_passed_lower(n: int, k: int, tail: float = 0.05) -> float:
    return (tail ** (1 / (n + 1))) ** k


def none_passed_upper(n: int, k: int, tail: float = 0.05) -> float:
    return (1 - tail ** (1 / (n + 1))) ** k


def width(n: int, c: int, k: int, mass: float = 0.9) -> float:
    tail = (1 - mass) / 2
    return beta.ppf(1 - tail, c + 1, n - c + 1) ** k - beta.ppf(tail, c + 1, n - c + 1) ** k


def obs(
    sid: str,
    trials: int,
    passed: int,
    failed: int,
    *,
    k: int = 1,
    goal: float = 0.5,
    errors: int = 0,
    invalid: int = 0,
    initial: int = 0,
) -> Observed:
    return Observed(
        sid,
        k=k,
        goal=goal,
        trials=trials,
        passed=passed,
        failed=failed,
        errors=errors,
        invalid=invalid,
        initial=initial,
    )


# ------------------------------------------------------------------ decided or not

LOW3 = all_passed_lower(3, 1)  # 0.4729: 3 of 3 passed, k = 1
HIGH3 = none_passed_upper(3, 1)  # 0.5271: 0 of 3 passed, k = 1


@pytest.mark.parametrize(
    ("n", "c", "k", "goal", "want"),
    [
        # the lower bound must be strictly above the goal
        (3, 3, 1, LOW3 - 1e-9, ABOVE),
        (3, 3, 1, LOW3 + 1e-9, UNDECIDED),
        # the upper bound strictly below it
        (3, 0, 1, HIGH3 + 1e-9, BELOW),
        (3, 0, 1, HIGH3 - 1e-9, UNDECIDED),
        # k raises both bounds to the k-th power: 3 of 3 at k = 3 is not above 0.2 any more
        (3, 3, 3, 0.2, UNDECIDED),
        (3, 3, 3, LOW3**3 - 1e-9, ABOVE),
        # 40 passes in a row at k = 3 is above the default alert target 0.8; 38 is not
        (40, 40, 3, 0.8, ABOVE),
        (38, 38, 3, 0.8, UNDECIDED),
        # fewer than k judged trials: undecided, however low the upper bound
        (2, 0, 3, 0.99, UNDECIDED),
        (3, 0, 3, 0.99, BELOW),
        # no trial at all: the prior's interval holds every goal inside
        (0, 0, 1, 0.5, UNDECIDED),
    ],
)
def test_decision_at_the_boundary(n: int, c: int, k: int, goal: float, want: str) -> None:
    assert decide(n, c, k, goal)[2] == want


def test_bounds_are_the_beta_quantiles_raised_to_k() -> None:
    lower, upper, _ = decide(5, 5, 3, 0.8)
    assert lower == pytest.approx(all_passed_lower(5, 3))
    assert upper == pytest.approx(0.95 ** (3 / 6))
    lower, upper, _ = decide(4, 0, 2, 0.8, credibility=0.8)
    assert upper == pytest.approx(none_passed_upper(4, 2, tail=0.1))
    assert lower == pytest.approx((1 - 0.9 ** (1 / 5)) ** 2)


def test_errors_and_invalid_trials_are_out_of_n() -> None:
    s = standing(obs("s", trials=9, passed=3, failed=0, k=1, errors=4, invalid=2))
    assert (s.n, s.passed, s.errors, s.invalid) == (3, 3, 4, 2)
    assert s.lower == pytest.approx(LOW3)
    assert s.pass_hat_k == 1.0


# ------------------------------------------------------------------ the rounds


def test_every_scenario_first_gets_its_k_trials() -> None:
    got = next_round([obs("a", 0, 0, 0, k=3), obs("b", 0, 0, 0, k=5)], budget=100)
    assert got == {"a": 3, "b": 5}


def test_initial_trials_include_trials_asked_for_and_only_the_missing_ones() -> None:
    got = next_round([obs("a", 2, 2, 0, k=3, initial=4), obs("b", 3, 0, 3, k=3)], budget=100)
    assert got == {"a": 2}


def test_a_budget_short_of_the_initial_trials_spreads_them_fewest_first() -> None:
    got = next_round(
        [obs("a", 0, 0, 0, k=3), obs("b", 1, 1, 0, k=3), obs("c", 0, 0, 0, k=3)], budget=5
    )
    # a and c lack 3, b lacks 2: one each to a, c (most missing first), then b, then a
    assert got == {"a": 2, "c": 1, "b": 1}
    assert sum(got.values()) == 5 - 1


def test_decided_scenarios_get_nothing_and_undecided_one_each() -> None:
    rows = [
        obs("high", 20, 20, 0),
        obs("low", 20, 0, 20),
        obs("mid1", 4, 2, 2),
        obs("mid2", 6, 3, 3),
    ]
    assert [standing(o).decision for o in rows] == [ABOVE, BELOW, UNDECIDED, UNDECIDED]
    assert next_round(rows, budget=1000) == {"mid1": 1, "mid2": 1}


def test_nothing_left_to_decide_ends_the_run() -> None:
    assert next_round([obs("high", 20, 20, 0), obs("low", 4, 0, 4)], budget=1000) == {}


def test_widest_first_when_the_batch_is_smaller() -> None:
    rows = [obs("narrow", 30, 15, 15), obs("wide", 4, 2, 2), obs("middle", 10, 5, 5)]
    assert width(4, 2, 1) > width(10, 5, 1) > width(30, 15, 1)  # the premise
    assert list(next_round(rows, budget=1000, batch=2).items()) == [("wide", 1), ("middle", 1)]


def test_ties_go_by_scenario_id() -> None:
    rows = [obs("b", 4, 2, 2), obs("a", 4, 2, 2), obs("c", 4, 2, 2)]
    assert next_round(rows, budget=1000, batch=1) == {"a": 1}
    assert list(next_round(rows, budget=1000)) == ["a", "b", "c"]


def test_a_larger_batch_goes_round_again_widest_first() -> None:
    rows = [obs("narrow", 10, 5, 5), obs("wide", 4, 2, 2), obs("done", 3, 0, 3, goal=0.9)]
    assert next_round(rows, budget=1000, batch=5) == {"wide": 3, "narrow": 2}


def test_budget_exhausted_mid_round() -> None:
    rows = [obs("narrow", 10, 5, 5), obs("wide", 4, 2, 2), obs("middle", 6, 3, 3)]
    spent = 20
    # two trials left of the budget for a round of three: the two widest get them
    assert next_round(rows, budget=spent + 2) == {"wide": 1, "middle": 1}
    assert next_round(rows, budget=spent) == {}
    assert next_round(rows, budget=spent - 5) == {}  # a smaller budget on a re-run


def test_trials_lost_to_errors_or_invalid_users_are_run_again() -> None:
    # three trials ran, two lost: one judged trial is fewer than k = 3
    rows = [obs("spoiled", 3, 0, 1, k=3, invalid=1, errors=1, goal=0.99)]
    assert standing(rows[0]).decision == UNDECIDED
    assert next_round(rows, budget=4) == {"spoiled": 1}
    assert next_round(rows, budget=3) == {}


@pytest.mark.parametrize(("budget", "batch"), [(-1, None), (10, 0)])
def test_nonsense_is_refused(budget: int, batch: int | None) -> None:
    with pytest.raises(ValueError):
        next_round([obs("a", 0, 0, 0)], budget=budget, batch=batch)


# ------------------------------------------------------------------ the fixed plan


def test_fixed_plan_gives_every_scenario_what_the_hardest_needed() -> None:
    # 0 of 3 is as narrow as it gets at 3; 20 of 20 needs all 20 at its own rate, so a
    # fixed plan reaching both widths runs 20 trials of each
    rows = [standing(obs("low", 3, 0, 3, k=1)), standing(obs("high", 20, 20, 0, k=1))]
    assert fixed_plan_trials(rows) == 40
    assert fixed_plan_trials([rows[0]]) == 3
    assert fixed_plan_trials([]) == 0


def test_fixed_plan_counts_judged_trials_at_least_k() -> None:
    rows = [standing(obs("a", 5, 0, 0, k=3, errors=5)), standing(obs("b", 3, 0, 3, k=3))]
    assert fixed_plan_trials(rows) == 6
