"""What the sink keeps, pure: which model each input topic holds, and whether a record is
one the projection can store. The live sink (steps.py) and `passk rebuild` (rebuild.py)
decide it the same way, so a rebuild holds what the live sink held."""

from __future__ import annotations

from pydantic import BaseModel

from schemas.events import (
    ConversationFinished,
    GateResult,
    JudgeVerdict,
    ScenarioReliability,
    TrialVerdict,
)
from services.contract.codec import Rejection, decode_or_reject
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.storage.records import SinkEvent, problem_with

# What each input topic holds. The aggregate's window records are kept for `passk windows`
# and the pictures over time.
MODELS: dict[Topic, type[BaseModel]] = {
    Topic.TRIAL_VERDICTS: TrialVerdict,
    Topic.GATE_RESULTS: GateResult,
    Topic.JUDGE_VERDICTS: JudgeVerdict,
    Topic.CONVERSATION_FINISHED: ConversationFinished,
    Topic.SCENARIO_RELIABILITY: ScenarioReliability,
}


def storable(
    value: bytes | None, model: type[BaseModel], settings: Settings
) -> SinkEvent | Rejection:
    """The record as the event it holds, or why the projection cannot store it: unreadable
    (the codec's reasons, within the settings' bounds) or a field out of its range
    ("invalid_field")."""
    decoded = decode_or_reject(value, model, settings)
    if isinstance(decoded, Rejection):
        return decoded
    problem = problem_with(decoded)  # type: ignore[arg-type]
    if problem is not None:
        return Rejection("invalid_field", problem)
    return decoded  # type: ignore[return-value]
