"""An invalid trial (its simulated user failed a user check) in the audit's expected counts."""

from __future__ import annotations

from services.audit.domain import Counts


def test_an_invalid_trial_is_in_none_of_the_three_counts() -> None:
    counts = Counts()
    for outcome in ("passed", "invalid", "failed", "error", "invalid"):
        counts.add(outcome)
    # what the aggregate's bucket holds in passed, failed and errors for the same trials
    assert (counts.passed, counts.failed, counts.errors, counts.n) == (1, 1, 1, 3)
