"""An independent computation of pass@k and pass^k, by enumerating every k-subset of the
observed trials, to check the pipeline's estimators against."""

from __future__ import annotations

from itertools import combinations


def brute_force(outcomes: list[bool], k: int) -> tuple[float, float]:
    subsets = list(combinations(outcomes, k))
    at_k = sum(any(s) for s in subsets) / len(subsets)
    hat_k = sum(all(s) for s in subsets) / len(subsets)
    return at_k, hat_k
