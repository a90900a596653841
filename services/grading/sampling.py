"""Which trials are in a sample, pure: the same answer in every worker, every door, every
re-import and the review queue (docs/contract.md, "Production traffic" and "Review queue").

A trial is in a sample of rate r when the first 32 bits of the SHA-256 of its id, read as
an unsigned integer, are below r * 2**32: rate 0 takes none, rate 1 takes all, and the
samples of two rates are nested (a trial sampled at 0.1 is sampled at 0.2).
"""

from __future__ import annotations

import hashlib

SCALE = 2**32


def sample_point(trial_id: str) -> int:
    """The trial's place in [0, 2**32): the first 8 hex digits of sha256(trial id)."""
    return int(hashlib.sha256(trial_id.encode("utf-8")).hexdigest()[:8], 16)


def sampled(trial_id: str, rate: float) -> bool:
    """Whether the trial is in the sample of `rate` (0..1)."""
    return sample_point(trial_id) < rate * SCALE
