"""The pass@k and pass^k estimators (n trials observed, c passed, k from the scenario).

pass@k = 1 - C(n-c, k) / C(n, k): the chance that k trials drawn from the n include a pass.
pass^k = C(c, k) / C(n, k): the chance that k trials drawn from the n all pass.
Both are unbiased for n > k; with n == k they are "any passed" and "all passed".
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Any

from scipy.special import betaincinv


def pass_at_k(n: int, c: int, k: int) -> float | None:
    _check(n, c, k)
    if n < k:
        return None
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float | None:
    _check(n, c, k)
    if n < k:
        return None
    return comb(c, k) / comb(n, k)


def pass_hat_k_interval(n: int, c: int, k: int, mass: float = 0.9) -> tuple[float, float]:
    """A central credible interval for pass^k: with a uniform prior, the per-trial pass
    rate p has the posterior Beta(c+1, n-c+1) after c passes in n trials, and pass^k is
    p**k. p**k is increasing in p, so its quantiles are the Beta quantiles raised to k.
    With no trials at all the interval is the prior's, wide as it should be."""
    _check(n, c, k)
    if not 0.0 < mass < 1.0:
        raise ValueError(f"need 0 < mass < 1 (got {mass})")
    tail = (1.0 - mass) / 2.0
    a, b = c + 1, n - c + 1
    lower = float(betaincinv(a, b, tail)) ** k
    upper = float(betaincinv(a, b, 1.0 - tail)) ** k
    return lower, upper


def pass_hat_k_median(n: int, c: int, k: int) -> float:
    """The posterior median of pass^k (the 50% quantile of p^k under Beta(c+1, n-c+1)):
    the figure shown beside the credible interval, which always holds it. The unbiased
    pass^k above can lie outside it (3 of 3 passed, k=3: pass^k 1.000, interval
    [0.11, 0.96], median 0.59)."""
    _check(n, c, k)
    return float(betaincinv(c + 1, n - c + 1, 0.5)) ** k


def _check(n: int, c: int, k: int) -> None:
    if k < 1 or n < 0 or not 0 <= c <= n:
        raise ValueError(f"need k >= 1 and 0 <= c <= n (got n={n}, c={c}, k={k})")


@dataclass
class ReliabilityTally:
    """Counts one scenario's trial outcomes; initialize / add / result, like a window aggregator."""

    k: int
    passed: int = 0
    failed: int = 0
    errors: int = 0
    # Trials the simulated user spoiled (a user check failed): out of n, counted apart.
    invalid: int = 0

    def add(self, outcome: str) -> None:
        if outcome == "passed":
            self.passed += 1
        elif outcome == "failed":
            self.failed += 1
        elif outcome == "error":
            self.errors += 1
        elif outcome == "invalid":
            self.invalid += 1
        else:
            raise ValueError(f"unknown outcome {outcome!r}")

    @property
    def n(self) -> int:
        # An errored trial is a trial that did not pass: it counts in n, never in c. An
        # invalid one says nothing about the agent: it is not in n at all.
        return self.passed + self.failed + self.errors

    @property
    def pass_at_k(self) -> float | None:
        return pass_at_k(self.n, self.passed, self.k)

    @property
    def pass_hat_k(self) -> float | None:
        return pass_hat_k(self.n, self.passed, self.k)

    def judged(self) -> ReliabilityTally:
        """The trials that were judged: errors (could not judge: a judge model that kept
        failing, say) left out. Monitoring asks this tally whether the *agent* got worse, so
        a judge outage does not read as an agent regression; the deploy gate and the run
        records keep the strict tally, where an errored trial is one that did not pass."""
        return ReliabilityTally(k=self.k, passed=self.passed, failed=self.failed)

    def figures(self) -> dict[str, Any]:
        """The counts and estimators a reliability record or row carries, under the names
        it carries them by."""
        return {
            "k": self.k,
            "n": self.n,
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "invalid": self.invalid,
            "pass_at_k": self.pass_at_k,
            "pass_hat_k": self.pass_hat_k,
            "scenario_passed": self.scenario_passed,
        }

    @property
    def insufficient(self) -> bool:
        return self.n < self.k

    @property
    def scenario_passed(self) -> bool:
        """Passes only with at least k trials observed and every one passed."""
        return not self.insufficient and self.passed == self.n


def drop_alert_holds(sampled: ReliabilityTally, min_pass_hat_k: float, min_trials: int) -> bool:
    """Whether PasskScenarioReliabilityDrop's condition (infra/prometheus/alerts.yml; its
    `for:` duration aside) holds for one window, given the window's *sampled* trials (every
    check ran; every trial without sampling) and its scenario's targets: over the trials
    that were judged (errors left out), pass^k is defined (at least k of them) and the upper
    bound of its 90% credible interval is below `min_pass_hat_k`, at least `min_trials`
    were judged, and errors are not more than half of the sampled trials. The gauges the
    rule reads are these figures (services/aggregate/metrics.py)."""
    judged = sampled.judged()
    if judged.pass_hat_k is None or judged.n < min_trials or 2 * sampled.errors > sampled.n:
        return False
    return pass_hat_k_interval(judged.n, judged.passed, judged.k)[1] < min_pass_hat_k
