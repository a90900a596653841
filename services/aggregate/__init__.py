"""Aggregate processor: pass@k and pass^k per scenario and run."""
