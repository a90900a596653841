"""The event contract: pydantic v2 models for every event passk reads or writes."""

from schemas.events import (
    SCHEMA_VERSION,
    AdvisoryJudge,
    CheckOutcome,
    ConversationFinished,
    DeadLetter,
    FailedCheck,
    GateResult,
    JudgeCalibration,
    JudgeVerdict,
    Label,
    Message,
    ScenarioReliability,
    SessionPersisted,
    TrialMetrics,
    TrialVerdict,
)
from schemas.scenario import AlertTargets, Expectation, JudgeSpec, Limits, Scenario

__all__ = [
    "SCHEMA_VERSION",
    "AdvisoryJudge",
    "AlertTargets",
    "CheckOutcome",
    "ConversationFinished",
    "DeadLetter",
    "Expectation",
    "FailedCheck",
    "GateResult",
    "JudgeCalibration",
    "JudgeSpec",
    "JudgeVerdict",
    "Label",
    "Limits",
    "Message",
    "Scenario",
    "ScenarioReliability",
    "SessionPersisted",
    "TrialMetrics",
    "TrialVerdict",
]
