"""One valid instance of every event model, as the JSON a producer would write."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from schemas.events import (
    ConversationFinished,
    DeadLetter,
    GateResult,
    JudgeCalibration,
    JudgeRequest,
    JudgeVerdict,
    Label,
    LabelledVerdict,
    RegradeRequest,
    ScenarioReliability,
    SessionPersisted,
    TrialVerdict,
)

WHEN = "2026-11-30T12:00:00.250000Z"
TRIAL = {
    "trial_id": "t-1",
    "run_id": "r-1",
    "scenario_id": "debrief-billable-repair",
    "scenario_version": "0123456789abcdef",
    "session_id": "s-1",
}

SAMPLES: dict[type[BaseModel], dict[str, Any]] = {
    ConversationFinished: {
        "event_id": "cf-1",
        "type": "conversation_finished",
        "schema_version": 1,
        "occurred_at": WHEN,
        "run_id": "r-1",
        "scenario_id": "debrief-billable-repair",
        "trial_id": "t-1",
        "session_id": "s-1",
        "agent_version": "agent-2.3",
        "exit_reason": "product_closed",
        "transcript": [
            {"role": "system", "content": "You are a debrief assistant."},
            {"role": "user", "content": "Replaced the pump."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "save", "arguments": '{"fault": "pump"}'},
                    }
                ],
            },
            {"role": "tool", "content": "ok", "tool_call_id": "call_1", "name": "save"},
            {"role": "assistant", "content": "Thanks, the report is saved."},
        ],
        "metrics": {
            "input_tokens": 1200,
            "output_tokens": 300,
            "turns": 3,
            "duration_ms": 41250.5,
            "latency_ms": 820.0,
        },
    },
    SessionPersisted: {
        "event_id": "sp-1",
        "type": "session_persisted",
        "schema_version": 1,
        "occurred_at": WHEN,
        "session_id": "s-1",
        "state": {"report": {"fault": "pump", "parts": ["PART-PUMP"]}, "follow_up": None},
        "trial_id": "t-1",
        "run_id": "r-1",
        "scenario_id": "debrief-billable-repair",
    },
    Label: {
        "event_id": "lb-1",
        "type": "label",
        "schema_version": 1,
        "occurred_at": WHEN,
        "trial_id": "t-1",
        "judge_id": "covered_expected_topics",
        "passed": False,
        "labeller": "ana",
        "note": "never asked about tests",
    },
    GateResult: {
        "event_id": "gate:t-1:state",
        "type": "gate_result",
        "schema_version": 1,
        "occurred_at": WHEN,
        **TRIAL,
        "gate": "state",
        "passed": False,
        "reasons": ["follow_up: expected absent, found {'date': 'tomorrow'}"],
        "checks": [
            {
                "check": "outcome:follow_up",
                "passed": False,
                "reason": "expected absent",
                "expected": None,
                "found": {"date": "tomorrow"},
            }
        ],
    },
    JudgeVerdict: {
        "event_id": "judge:t-1:covered_expected_topics",
        "type": "judge_verdict",
        "schema_version": 1,
        "occurred_at": WHEN,
        **TRIAL,
        "judge_id": "covered_expected_topics",
        "judge_kind": "llm",
        "judge_spec": {"assertion": "The agent asked about fault, steps, parts and tests."},
        "gating": True,
        "result": "passed",
        "reason": "All four topics were covered.",
        "model": "gpt-4o-mini",
        "prompt_hash": "abc123",
        "latency_ms": 950.0,
        "input_tokens": 800,
        "output_tokens": 40,
        "attempts": 1,
        "cached": False,
    },
    TrialVerdict: {
        "event_id": "verdict:t-1",
        "type": "trial_verdict",
        "schema_version": 1,
        "occurred_at": WHEN,
        **TRIAL,
        "k": 3,
        "outcome": "failed",
        "failed_checks": [{"check": "gate:state", "reason": "follow_up present"}],
        "checks_passed": ["gate:exit", "judge:covered_expected_topics"],
        "agent_version": "agent-2.3",
        "exit_reason": "product_closed",
        "metrics": {"turns": 3, "duration_ms": 41250.5},
        "finished_at": "2026-11-30T11:59:58Z",
    },
    JudgeCalibration: {
        "event_id": "calibration:avoided_repetition:0123456789abcdef:set:1",
        "type": "judge_calibration",
        "schema_version": 1,
        "occurred_at": WHEN,
        "judge_id": "avoided_repetition",
        "judge_version": "0123456789abcdef",
        "assertion": "The agent did not re-ask a question already answered.",
        "prompt_hash": "abc123",
        "model": "gpt-4o-mini",
        "source": "set",
        "tp": 11,
        "fp": 2,
        "fn": 1,
        "tn": 6,
        "errors": 0,
        "n": 20,
        "precision": 0.8461538461538461,
        "recall": 0.9166666666666666,
        "bar": 0.8,
        "min_labelled": 10,
        "gating": True,
        "reason": "precision 0.85 >= 0.80 on 20 labels",
    },
    LabelledVerdict: {
        "event_id": "labelled:t-1:avoided_repetition:label-1",
        "type": "labelled_verdict",
        "schema_version": 1,
        "occurred_at": WHEN,
        "trial_id": "t-1",
        "run_id": "r-1",
        "scenario_id": "debrief-billable-repair",
        "judge_id": "avoided_repetition",
        "judge_version": "0123456789abcdef",
        "judge_result": "failed",
        "judge_reason": "asked twice for the serial number",
        "label": "pass",
        "note": "it asked to confirm, not again",
        "label_event_id": "label-1",
    },
    ScenarioReliability: {
        "event_id": "reliability:debrief-billable-repair:1h:2026-11-30T11:00:00Z:4",
        "type": "scenario_reliability",
        "schema_version": 1,
        "occurred_at": WHEN,
        "scenario_id": "debrief-billable-repair",
        "scenario_version": "0123456789abcdef",
        "k": 3,
        "n": 4,
        "passed": 3,
        "failed": 1,
        "errors": 0,
        "pass_at_k": 1.0,
        "pass_hat_k": 0.25,
        "pass_hat_k_lower": 0.0402,
        "pass_hat_k_upper": 0.7878,
        "scenario_passed": False,
        "run_id": None,
        "window": "1h",
        "window_start": "2026-11-30T11:00:00Z",
        "window_end": "2026-11-30T12:00:00Z",
    },
    DeadLetter: {
        "event_id": "dl:passk.conversation-finished.v1:3:42:gate",
        "type": "dead_letter",
        "schema_version": 1,
        "occurred_at": WHEN,
        "source_topic": "passk.conversation-finished.v1",
        "partition": 3,
        "offset": 42,
        "key_b64": "cy0x",
        "value_b64": "e25vdCBqc29u",
        "reason": "invalid_json",
        "detail": "Expecting property name enclosed in double quotes",
        "processor": "gate",
    },
}
SAMPLES[RegradeRequest] = {
    "event_id": "regrade:t-1:2",
    "type": "regrade_request",
    "schema_version": 1,
    "occurred_at": WHEN,
    **TRIAL,
    "attempt": 2,
    "reason": "passk regrade --errors-only: was error",
    "conversation": SAMPLES[ConversationFinished],
    "session": SAMPLES[SessionPersisted],
}

SAMPLES[JudgeRequest] = {
    "event_id": "judge-request:t-1:0123456789abcdef",
    "type": "judge_request",
    "schema_version": 1,
    "occurred_at": WHEN,
    "trial_id": "t-1",
    "scenario_id": "debrief-billable-repair",
    "scenario_version": "0123456789abcdef",
    "gates_passed": False,
    "failed_gates": ["state"],
    "conversation": SAMPLES[ConversationFinished],
}


def sample(model: type[BaseModel], **changes: Any) -> dict[str, Any]:
    """A fresh copy of the sample for `model`, with top-level fields changed or removed
    (pass `field=DROP` to remove one)."""
    data = {**SAMPLES[model], **changes}
    return {k: v for k, v in data.items() if v is not DROP}


DROP = object()
