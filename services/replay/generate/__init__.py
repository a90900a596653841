"""Synthetic, production-like traffic for a set of scenarios, with the outcome each trial must get.

Pure and deterministic: the same scenarios, config and seed give the same events, byte
for byte. Each trial passes with its scenario's true pass probability; a failing trial
carries exactly one real failure mode, and delivery quirks (a session event early,
late, duplicated, or missing) are layered on independently. The expected outcome of
every trial is written next to the traffic, read from the plan of what was injected.

config — options and results; values — session states; planning — failure modes and
trial plans; transcripts — conversations; run — events of each trial and the whole run.
"""

from services.replay.generate.config import (
    DEFAULT_QUIRK_RATES,
    FAILURE_MODES,
    QUIRKS,
    WRONG_EXITS,
    Expected,
    ExpectedScenario,
    ExpectedTrial,
    GenerateConfig,
    GenerateError,
    Traffic,
)
from services.replay.generate.planning import TrialPlan, applicable_modes, failed_checks
from services.replay.generate.run import build_trial, generate, generate_ending_by
from services.replay.generate.transcripts import build_transcript, fail_marker
from services.replay.generate.values import holds, matching_string, passing_state, realistic_value

__all__ = [
    "generate_ending_by",
    "DEFAULT_QUIRK_RATES",
    "FAILURE_MODES",
    "QUIRKS",
    "WRONG_EXITS",
    "Expected",
    "ExpectedScenario",
    "ExpectedTrial",
    "GenerateConfig",
    "GenerateError",
    "Traffic",
    "TrialPlan",
    "applicable_modes",
    "build_transcript",
    "build_trial",
    "fail_marker",
    "failed_checks",
    "generate",
    "holds",
    "matching_string",
    "passing_state",
    "realistic_value",
]
