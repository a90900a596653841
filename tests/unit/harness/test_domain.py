from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas.scenario import Scenario
from services.harness.domain import (
    AgentError,
    AgentReply,
    Conversation,
    FinishedTrial,
    PlannedTrial,
    Probed,
    after_reply,
    conversation_event,
    parse_reply,
    plan_trials,
    session_event,
    trial_id,
    trial_number,
    user_gives_up,
)


def scenario(
    sid: str = "s1", k: int = 3, max_turns: int | None = None, user_turns: int = 20
) -> Scenario:
    return Scenario.model_validate(
        {
            "id": sid,
            "trials": k,
            "expected_exit": "product_closed",
            "limits": {"max_turns": max_turns} if max_turns else {},
            "user": {"script": ["hi"], "max_turns": user_turns},
        }
    ).versioned()


def test_trial_ids_are_run_scenario_and_three_digits() -> None:
    assert trial_id("r:1", "s", 7) == "r:1:s:007"
    assert trial_number("r:1:s:007") == 7


def test_plan_is_max_of_trials_and_k_interleaved() -> None:
    plan = plan_trials([scenario("a", k=3), scenario("b", k=5)], "run", trials=4)
    ids = [p.trial_id for p in plan]
    assert ids.count("run:a:004") == 1 and "run:a:005" not in ids  # max(4, 3)
    assert [p.trial_id for p in plan if p.scenario.id == "b"][-1] == "run:b:005"  # max(4, 5)
    assert ids[:2] == ["run:a:001", "run:b:001"]  # interleaved
    assert len(ids) == len(set(ids)) == 9


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ([1, 2], "not a JSON object"),
        ({"answer": "hi"}, "neither `reply` nor `exit_reason`"),
        ({"reply": 3}, "reply"),
        ({"reply": "x", "exit_reason": ""}, "exit_reason"),
    ],
)
def test_replies_off_the_protocol_are_agent_errors(payload: object, why: str) -> None:
    with pytest.raises(AgentError) as caught:
        parse_reply(payload)
    assert why in caught.value.reason and caught.value.exit_reason == "agent_error"


def test_the_product_exit_ends_the_conversation_else_the_turn_limit() -> None:
    conv = Conversation()
    conv.said_by_user("hi")
    closing = AgentReply(reply="bye", exit_reason="handed_off")
    conv.replied(closing, 1.0)
    assert after_reply(scenario(max_turns=3), conv, closing) == "handed_off"
    going = AgentReply(reply="more?")
    assert after_reply(scenario(max_turns=3), conv, going) == "continue"  # 2 turns, 3rd ok
    conv.said_by_user("x")
    conv.replied(going, 1.0)
    assert after_reply(scenario(max_turns=4), conv, going) == "max_turns"  # 5th > 4
    assert after_reply(scenario(max_turns=None), conv, going) == "continue"


def test_user_budget_is_user_turns() -> None:
    conv = Conversation()
    conv.said_by_user("a")
    assert not user_gives_up(scenario(user_turns=2), conv)
    conv.said_by_user("b")
    assert user_gives_up(scenario(user_turns=2), conv)


def _finished(
    conv: Conversation, exit_reason: str = "product_closed", error: str | None = None
) -> FinishedTrial:
    planned = PlannedTrial(scenario(), 2, "run:s1:002")
    return FinishedTrial(
        planned=planned,
        run_id="run",
        agent_version="v9",
        exit_reason=exit_reason,
        conversation=conv,
        duration_ms=12.5,
        finished_at=datetime(2026, 1, 1, tzinfo=UTC),
        harness_error=error,
    )


def test_events_carry_deterministic_ids_metrics_tokens_and_checks() -> None:
    conv = Conversation()
    conv.said_by_user("hi")
    conv.replied(
        parse_reply(
            {
                "reply": "a",
                "session_id": "S1",
                "usage": {"prompt_tokens": 10, "completion_tokens": 3},
                "checks": [{"id": "policy", "passed": False, "reason": "no"}],
            }
        ),
        4.0,
    )
    conv.said_by_user("more")
    conv.replied(
        parse_reply(
            {
                "reply": "b",
                "exit_reason": "product_closed",
                "usage": {"input_tokens": 5, "output_tokens": 1},
            }
        ),
        8.0,
    )
    event = conversation_event(_finished(conv))
    again = conversation_event(_finished(conv))
    assert event.event_id == again.event_id == "run:run:s1:002:conversation"
    assert event.session_id == "S1" and event.trial_id == "run:s1:002"
    # pinned: the hash of the scenario version the trial was run against
    assert event.scenario_version == scenario().version and event.scenario_version
    assert event.metrics is not None
    assert (event.metrics.turns, event.metrics.input_tokens, event.metrics.output_tokens) == (
        4,
        15,
        4,
    )
    assert event.metrics.latency_ms == 6.0 and event.metrics.duration_ms == 12.5
    assert [c.id for c in event.checks] == ["policy"] and not event.checks[0].passed
    session = session_event(_finished(conv), Probed({"a": 1}, "handed_off"))
    assert session.event_id == "run:run:s1:002:session"
    assert (session.session_id, session.exit_reason, session.state) == (
        "S1",
        "handed_off",
        {"a": 1},
    )


def test_harness_exit_keeps_its_reason_and_names_a_session() -> None:
    conv = Conversation()
    conv.said_by_user("hi")
    event = conversation_event(
        _finished(conv, "agent_error", "HTTP 500 from x"), state_probe="none found"
    )
    dumped = event.model_dump(mode="json")
    assert dumped["exit_reason"] == "agent_error"
    assert dumped["harness_error"] == "HTTP 500 from x"
    assert dumped["state_probe"] == "none found"
    assert event.session_id == "run:s1:002"  # the agent named none: the trial's own
    assert dumped["metrics"]["latency_ms"] is None
