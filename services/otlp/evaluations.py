"""Check results and trial verdicts as `gen_ai.evaluation.result` events (pure): one per
judge verdict, gate result and trial verdict, with the graded trace's ids when the trial
came from a trace. Semantic conventions: semconv.py (v1.37.0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas.events import GateResult, JudgeVerdict, TrialVerdict
from services.otlp import semconv as sc

Graded = JudgeVerdict | GateResult | TrialVerdict
LABELS = {
    "passed": "pass",
    "failed": "fail",
    "error": "error",
    "invalid": "invalid",
    "skipped": "skipped",
    "not_sampled": "not_sampled",
}


@dataclass(frozen=True)
class TraceRef:
    trace_id: str  # 32 hex
    span_id: str  # 16 hex


@dataclass(frozen=True)
class Evaluation:
    kind: str  # judge | gate | trial
    timestamp_ns: int
    attributes: dict[str, Any]
    trace: TraceRef | None


def evaluation_of(event: Graded, trace: TraceRef | None) -> Evaluation:
    outcome: str
    if isinstance(event, JudgeVerdict):
        kind, name, outcome, why = "judge", f"judge:{event.judge_id}", event.result, event.reason
    elif isinstance(event, GateResult):
        kind, name = "gate", f"gate:{event.gate}"
        outcome = "passed" if event.passed else "failed"
        why = "; ".join(event.reasons) or "all checks held"
    else:
        kind, name, outcome = "trial", "passk.trial", event.outcome
        why = (
            "; ".join(f"{c.check}: {c.reason}" for c in event.failed_checks) or "every check passed"
        )
    attributes: dict[str, Any] = {
        sc.EVALUATION_NAME: name,
        sc.EVALUATION_LABEL: LABELS[outcome],
        sc.EVALUATION_VALUE: 1.0 if outcome == "passed" else 0.0,
        sc.EVALUATION_EXPLANATION: why,
        "passk.event_id": event.event_id,  # a receiver drops a re-delivery by it
        sc.RUN_ID: event.run_id,
        sc.SCENARIO_ID: event.scenario_id,
        sc.TRIAL_ID: event.trial_id,
        "passk.scenario_version": event.scenario_version,
        "passk.attempt": event.attempt,
    }
    if isinstance(event, JudgeVerdict):
        attributes["passk.judge.gating"] = event.gating
    return Evaluation(kind, int(event.occurred_at.timestamp() * 1e9), attributes, trace)
