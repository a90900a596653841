"""Verdict processor: one TrialVerdict per trial from its gate results and judge verdicts."""
