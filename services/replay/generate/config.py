"""What the generator is asked for, and what it hands back: the traffic and its plan."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from schemas.events import ConversationFinished, SessionPersisted
from schemas.scenario import Scenario

FAILURE_MODES: tuple[str, ...] = (
    "wrong_exit",
    "missing_field",
    "unexpected_follow_up",
    "over_turn_limit",
    "over_duration",
    "judge_failed",
    # The harness saw a clean close, but the product persisted another exit.
    "product_exit_wrong",
)
# Delivery quirks: how the events reach the log. Only session_missing changes the outcome.
QUIRKS: tuple[str, ...] = ("session_early", "session_late", "duplicated", "session_missing")
DEFAULT_QUIRK_RATES: dict[str, float] = {
    "session_early": 0.1,
    "session_late": 0.1,
    "duplicated": 0.1,
    "session_missing": 0.05,
}
# Exits a product that never closed the conversation reports.
WRONG_EXITS: tuple[str, ...] = ("persona_exhausted", "max_turns", "error")
MAX_XEGER_TRIES = 50


class GenerateError(ValueError):
    """The scenarios or the options cannot yield valid traffic; the message says why."""


@dataclass(frozen=True)
class GenerateConfig:
    run_id: str
    started_at: datetime  # occurred_at of the first event; pass it in to stay deterministic
    seed: int = 0
    trials: int = 0  # at least each scenario's k
    pass_prob: Mapping[str, float] = field(default_factory=dict)
    default_pass_prob: float = 0.8
    quirk_rates: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_QUIRK_RATES))
    every_mode: bool = False
    agent_version: str | None = None
    # Judges the pipeline will treat as advisory (calibrated below the bar, say): the
    # stand-in is made to fail each on this share of its trials, never as a failure mode,
    # and the expected outcome is unchanged, since an advisory judge cannot fail a trial.
    advisory_flags: Mapping[str, float] = field(default_factory=dict)

    def probability(self, scenario_id: str) -> float:
        return self.pass_prob.get(scenario_id, self.default_pass_prob)

    def validate(self, scenarios: Sequence[Scenario]) -> None:
        if not self.run_id:
            raise GenerateError("run_id must not be empty")
        if self.started_at.tzinfo is None:
            raise GenerateError("started_at must be timezone-aware")
        known = {s.id for s in scenarios}
        unknown = sorted(set(self.pass_prob) - known)
        if unknown:
            raise GenerateError(f"pass probability given for unknown scenarios: {unknown}")
        for sid, p in [*self.pass_prob.items(), ("(default)", self.default_pass_prob)]:
            if not 0.0 <= p <= 1.0:
                raise GenerateError(f"pass probability for {sid} must be in [0, 1], got {p}")
        judges = {j.id for s in scenarios for j in s.judges}
        unknown_judges = sorted(set(self.advisory_flags) - judges)
        if unknown_judges:
            raise GenerateError(f"advisory flags given for unknown judges: {unknown_judges}")
        for judge_id, share in self.advisory_flags.items():
            if not 0.0 <= share <= 1.0:
                raise GenerateError(f"advisory share for {judge_id} must be in [0, 1]")
        bad = sorted(set(self.quirk_rates) - set(QUIRKS))
        if bad:
            raise GenerateError(f"unknown quirks {bad}; known: {', '.join(QUIRKS)}")
        for name, rate in self.quirk_rates.items():
            if not 0.0 <= rate <= 1.0:
                raise GenerateError(f"quirk rate for {name} must be in [0, 1], got {rate}")
        ids = [s.id for s in scenarios]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise GenerateError(f"scenario ids given twice: {dupes}")


class ExpectedTrial(BaseModel):
    trial_id: str
    scenario_id: str
    session_id: str
    expected_outcome: Literal["passed", "failed"]
    failure_mode: str | None
    quirks: list[str]
    expected_failed_checks: list[str]
    # Whose exit the exit gate must check: the session's when the product recorded one
    # and the session is delivered, the harness's otherwise.
    expected_exit_source: Literal["session", "harness"] = "harness"
    detail: str = ""  # which expectation / judge / exit the failure mode targeted
    advisory_flagged: list[str] = Field(default_factory=list)  # advisory judges made to fail


class ExpectedScenario(BaseModel):
    scenario_id: str
    k: int
    n: int
    passed: int


class Expected(BaseModel):
    run_id: str
    trials: list[ExpectedTrial]
    scenarios: list[ExpectedScenario]


InputEvent = ConversationFinished | SessionPersisted


@dataclass
class Traffic:
    events: list[InputEvent]  # in file order, duplicates included
    expected: Expected

    def jsonl(self) -> str:
        return "".join(e.model_dump_json() + "\n" for e in self.events)

    def expected_json(self) -> str:
        return self.expected.model_dump_json(indent=2) + "\n"
