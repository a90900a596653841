"""Derived and input events for the sink, report and rebuild tests, built like the
processors build them (deterministic event ids)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.events import (
    ConversationFinished,
    FailedCheck,
    GateResult,
    JudgeVerdict,
    Message,
    ScenarioReliability,
    TrialMetrics,
    TrialVerdict,
)
from tests.unit import factories

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ref(trial_id: str, run_id: str, scenario_id: str, version: str = "v1") -> dict[str, str]:
    return {
        "trial_id": trial_id,
        "run_id": run_id,
        "scenario_id": scenario_id,
        "scenario_version": version,
        "session_id": f"session-{trial_id}",
    }


def gate(
    trial_id: str,
    gate_name: str,
    passed: bool,
    *,
    run_id: str = "run-1",
    scenario_id: str = "billing",
    version: str = "v1",
    when: float = 0.0,
) -> GateResult:
    return GateResult(
        event_id=f"gate:{trial_id}:{gate_name}:{version}",
        occurred_at=at(when),
        gate=gate_name,  # type: ignore[arg-type]
        passed=passed,
        reasons=[] if passed else [f"{gate_name} gate failed for {trial_id}"],
        **ref(trial_id, run_id, scenario_id, version),
    )


def judge(
    trial_id: str,
    judge_id: str,
    result: str,
    *,
    run_id: str = "run-1",
    scenario_id: str = "billing",
    version: str = "v1",
    when: float = 0.0,
    gating: bool = True,
) -> JudgeVerdict:
    return JudgeVerdict(
        event_id=f"judge:{trial_id}:{judge_id}:{version}",
        occurred_at=at(when),
        judge_id=judge_id,
        gating=gating,
        judge_kind="llm",
        judge_spec={"assertion": f"{judge_id} holds"},
        result=result,  # type: ignore[arg-type]
        reason=f"{judge_id}: {result}",
        model="stand-in",
        attempts=1,
        **ref(trial_id, run_id, scenario_id, version),
    )


def verdict(
    trial_id: str,
    outcome: str,
    *,
    k: int = 3,
    run_id: str = "run-1",
    scenario_id: str = "billing",
    version: str = "v1",
    when: float = 1.0,
    failed: list[tuple[str, str]] | None = None,
    **facts: Any,
) -> TrialVerdict:
    if failed is None:
        failed = [] if outcome == "passed" else [("gate:state", f"state wrong in {trial_id}")]
    return TrialVerdict(
        **{"event_id": f"verdict:{trial_id}", **facts.pop("ids", {})},
        occurred_at=at(when),
        k=k,
        outcome=outcome,  # type: ignore[arg-type]
        failed_checks=[FailedCheck(check=c, reason=r) for c, r in failed],
        checks_passed=["gate:exit"],
        agent_version="agent-7",
        **{
            "exit_reason": "product_closed",
            "metrics": TrialMetrics(
                turns=6, input_tokens=120, output_tokens=80, duration_ms=5300.0
            ),
            **facts,
        },
        finished_at=at(0),
        **ref(trial_id, run_id, scenario_id, version),
    )


# What the report tests show of a trial's conversation.
TRANSCRIPT = [
    Message(role="user", content="The pump was broken, I replaced it."),
    Message(
        role="assistant",
        content=None,
        tool_calls=[
            {
                "id": "call-1",
                "type": "function",
                "function": {"name": "save_report", "arguments": '{"fault": "pump"}'},
            }
        ],
    ),
    Message(role="tool", tool_call_id="call-1", content='{"ok": true}'),
    Message(role="assistant", content="Saved. Anything else?"),
]


def conversation(
    trial_id: str, *, run_id: str = "run-1", scenario_id: str = "billing", when: float = 0.0
) -> ConversationFinished:
    return factories.conversation(
        trial_id,
        event_id=f"cf:{trial_id}",
        occurred_at=at(when),
        run_id=run_id,
        scenario_id=scenario_id,
        session_id=f"session-{trial_id}",
        agent_version="agent-7",
        transcript=TRANSCRIPT,
        metrics=TrialMetrics(turns=3, duration_ms=4200.0),
    )


def run_events(run_id: str = "run-1") -> list:
    """One run: scenario `billing` (3 trials, all pass), `followup` (3 trials, one fails
    its state gate), `triage` (1 of k=3 trials: insufficient), each trial fully graded."""
    events: list = []
    plan = [
        ("billing", "b1", "passed"),
        ("billing", "b2", "passed"),
        ("billing", "b3", "passed"),
        ("followup", "f1", "passed"),
        ("followup", "f2", "failed"),
        ("followup", "f3", "passed"),
        ("triage", "t1", "passed"),
    ]
    for scenario_id, trial, outcome in plan:
        trial_id = f"{run_id}-{trial}"
        kw = {"run_id": run_id, "scenario_id": scenario_id}
        events.append(conversation(trial_id, **kw))
        events.append(gate(trial_id, "exit", True, **kw))
        events.append(gate(trial_id, "state", outcome == "passed", **kw))
        events.append(judge(trial_id, "polite", "passed", **kw))
        events.append(verdict(trial_id, outcome, **kw))
    return events


def window(
    seq: int,
    passed: int,
    failed: int = 0,
    errors: int = 0,
    *,
    start: datetime = T0,
    scenario: str = "s1",
    k: int = 3,
    size: str = "1h",
    seconds: int = 3600,
    target: tuple[float, int] = (0.8, 10),
) -> ScenarioReliability:
    """A window record as the aggregate publishes it (figures from scipy, not passk)."""
    from math import comb

    from scipy.stats import beta

    n, c = passed + failed + errors, passed
    return ScenarioReliability(
        event_id=f"reliability:{scenario}:{size}:{start.isoformat()}:{seq}",
        occurred_at=start + timedelta(seconds=seq),
        scenario_id=scenario,
        k=k,
        n=n,
        passed=passed,
        failed=failed,
        errors=errors,
        pass_at_k=None if n < k else 1 - comb(n - c, k) / comb(n, k),
        pass_hat_k=None if n < k else comb(c, k) / comb(n, k),
        pass_hat_k_lower=float(beta.ppf(0.05, c + 1, n - c + 1)) ** k,
        pass_hat_k_upper=float(beta.ppf(0.95, c + 1, n - c + 1)) ** k,
        scenario_passed=n >= k and c == n,
        window=size,
        window_start=start,
        window_end=start + timedelta(seconds=seconds),
        alert_min_pass_hat_k=target[0],
        alert_min_trials=target[1],
    )
