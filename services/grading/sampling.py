"""Which trials are in a sample, pure: the same answer in every worker, every door, every
re-import and the review queue (docs/contract.md, "Production traffic" and "Review queue").

A trial is in a sample of rate r when the first 32 bits of the SHA-256 of its id, read as
an unsigned integer, are below r * 2**32:
`int(sha256(trial_id.encode("utf-8")).hexdigest()[:8], 16) < r * 2**32`. Rate 0 takes
none, rate 1 takes all, and the samples of two rates nest (the 10 % sample is inside the
50 % one).
"""

from __future__ import annotations

import hashlib

SCALE = 2**32
SPACE = SCALE


def sample_point(trial_id: str) -> int:
    """The trial's place in [0, 2**32): the first 8 hex digits of sha256(trial id)."""
    return int(hashlib.sha256(trial_id.encode("utf-8")).hexdigest()[:8], 16)


def in_sample(trial_id: str, rate: float) -> bool:
    """True when the trial is in the sample at `rate` (0.0: none, 1.0: every trial)."""
    return sample_point(trial_id) < rate * SCALE


# the review queue's name for it
sampled = in_sample
