"""Small builders for events and scenarios used across unit tests."""

from __future__ import annotations

from typing import Any

from schemas.events import (
    ConversationFinished,
    GateResult,
    JudgeVerdict,
    Message,
    SessionPersisted,
    TrialMetrics,
)
from schemas.scenario import Scenario

# A persisted state with every JSON kind, empty values and a digit key: paths and
# expectations are tested against it.
EVERY_KIND_STATE: dict[str, Any] = {
    "report": {
        "fault": "Pump seized",
        "parts": ["PART-PUMP"],
        "summary": "Replaced the circulation pump; pressure test OK.",
        "notes": "",
        "tags": [],
        "extra": {},
        "nothing": None,
        "count": 0,
        "flag": False,
        "visits": [{"tech": "ana", "hours": 2}, {"tech": "bo", "hours": 1.5}],
        "0": "digit key",
    },
    "billability": [{"code": "LAB-2H", "qty": 1}, {"code": "PART-PUMP", "qty": 1}],
}


GOOD_STATE: dict[str, Any] = {
    "report": {"fault": "pump seized", "parts": ["pump"], "summary": "Replaced the pump."},
    "billability": [{"code": "PART-PUMP", "qty": 1}, {"code": "LAB-2H", "qty": 1}],
}


def scenario(**overrides: Any) -> Scenario:
    body: dict[str, Any] = {
        "id": "debrief-billable-repair",
        "trials": 3,
        "expected_exit": "product_closed",
        "limits": {"max_turns": 6, "max_duration_s": 900},
        "outcome": [
            {"path": "report.fault", "present": True},
            {"path": "report.parts", "present": True},
            {
                "path": "billability",
                "equals": [{"code": "LAB-2H", "qty": 1}, {"code": "PART-PUMP", "qty": 1}],
                "unordered": True,
            },
            {"path": "follow_up", "present": False},
            {"path": "report.summary", "matches": "(?i)replaced"},
        ],
        "judges": [
            {"id": "covered_expected_topics", "assertion": "Asked about fault and parts."},
            {"id": "avoided_repetition", "assertion": "Did not re-ask."},
            {"id": "polite", "assertion": "Was polite.", "gating": False},
        ],
    }
    body.update(overrides)
    return Scenario.model_validate(body).versioned()


def conversation(trial: str = "t1", **overrides: Any) -> ConversationFinished:
    body: dict[str, Any] = dict(
        event_id=f"cf-{trial}",
        run_id="run-1",
        scenario_id="debrief-billable-repair",
        trial_id=trial,
        session_id=f"s-{trial}",
        agent_version="1.2.3",
        exit_reason="product_closed",
        transcript=[
            Message(role="system", content="You are a debrief agent."),
            Message(role="assistant", content="What was the fault?"),
            Message(role="user", content="The pump seized."),
            Message(
                role="assistant",
                content=None,
                tool_calls=[
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "save", "arguments": "{}"},
                    }
                ],
            ),
            Message(role="tool", tool_call_id="c1", content="ok"),
            Message(role="assistant", content="Recorded. Goodbye."),
        ],
        metrics=TrialMetrics(turns=4, duration_ms=120_000, input_tokens=900, output_tokens=300),
    )
    body.update(overrides)
    return ConversationFinished(**body)


def session(trial: str = "t1", state: dict[str, Any] | None = None, **overrides: Any):
    body: dict[str, Any] = dict(
        event_id=f"sp-{trial}",
        session_id=f"s-{trial}",
        state=GOOD_STATE if state is None else state,
    )
    body.update(overrides)
    return SessionPersisted(**body)


def gate_result(
    gate: str,
    passed: bool = True,
    trial: str = "t1",
    version: str = "v1",
    reasons: list[str] | None = None,
    **facts: Any,
) -> GateResult:
    return GateResult(
        event_id=f"gate:{trial}:{gate}:{version}",
        trial_id=trial,
        run_id="run-1",
        scenario_id="debrief-billable-repair",
        scenario_version=version,
        session_id=f"s-{trial}",
        gate=gate,
        passed=passed,
        reasons=reasons or ([] if passed else [f"{gate} broke"]),
        **{"exit_reason": "product_closed", **facts},
    )


def judge_verdict(
    judge: str, result: str = "passed", trial: str = "t1", version: str = "v1", gating: bool = True
) -> JudgeVerdict:
    return JudgeVerdict(
        event_id=f"judge:{trial}:{judge}:{version}",
        trial_id=trial,
        run_id="run-1",
        scenario_id="debrief-billable-repair",
        scenario_version=version,
        session_id=f"s-{trial}",
        judge_id=judge,
        judge_kind="llm",
        gating=gating,
        result=result,
        reason=f"{judge} said {result}",
    )
