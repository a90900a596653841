"""Which trials run their LLM judges (DESIGN.md, "Production traffic"): a pure function of
the trial id, so every worker, every door and every re-import draw the same sample, and
two rates nest (the 10 % sample is inside the 50 % one)."""

from __future__ import annotations

from hashlib import sha256

SPACE = 2**32


def in_sample(trial_id: str, rate: float) -> bool:
    """True when the trial is in the sample at `rate` (0.0: none, 1.0: every trial):
    `int(sha256(trial_id.encode("utf-8")).hexdigest()[:8], 16) < rate * 2**32`."""
    return int(sha256(trial_id.encode("utf-8")).hexdigest()[:8], 16) < rate * SPACE
