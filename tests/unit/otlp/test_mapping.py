"""Agent traces to trials: ids, transcript, tool calls, tokens, duration, exit, state."""

from __future__ import annotations

import json

import pytest

from services.otlp.mapping import Skipped, Taken, assemble, by_trace, spans_of
from tests.unit.otlp.spans import PASSK, agent_trace, chat_attrs, request, span


def _one(*pb, resource=None):  # type: ignore[no-untyped-def]
    traces = by_trace(spans_of(request(*pb, resource=resource)))
    assert len(traces) == 1
    return assemble(next(iter(traces.values())))


def _transcript(*chats):  # type: ignore[no-untyped-def]
    """The (role, content) of each message of the one trial made of these chat spans
    under an agent root span."""
    root = span(1, 1, None, "invoke_agent", {"gen_ai.operation.name": "invoke_agent", **PASSK})
    taken = _one(*chats, root)
    assert isinstance(taken, Taken)
    return [(m.role, m.content) for m in taken.conversation.transcript]


def test_a_complete_agent_trace_is_one_trial() -> None:
    taken = _one(*agent_trace())
    assert isinstance(taken, Taken)
    cf = taken.conversation
    assert (cf.run_id, cf.scenario_id, cf.trial_id, cf.session_id) == (
        "run-1",
        "debrief",
        "t-1",
        "sess-1",
    )
    assert cf.exit_reason == "product_closed"
    assert [(m.role, m.content) for m in cf.transcript] == [
        ("user", "Job 4112."),
        ("assistant", None),
        ("tool", "washer"),
        ("assistant", "Done."),
    ]
    assert cf.transcript[1].tool_calls == [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"job": "4112"}'},
        }
    ]
    assert cf.transcript[2].tool_call_id == "c1"
    assert cf.metrics is not None
    assert (cf.metrics.input_tokens, cf.metrics.output_tokens) == (40, 7)
    assert cf.metrics.duration_ms == 1500
    extra = cf.model_dump()
    assert extra["otel_trace_id"] == f"{1:032x}" and extra["otel_span_id"] == f"{1:016x}"
    assert extra["otel_tool_calls"][0]["name"] == "lookup"
    assert extra["otel_tool_calls"][0]["result"] == "washer"
    assert taken.session is None
    assert cf.event_id == f"otel:{1:032x}:conversation"


def test_the_persisted_state_becomes_a_session_with_the_exit() -> None:
    state = {"report": {"fault": "pump"}}
    taken = _one(*agent_trace(root_attrs={"passk.session.state": json.dumps(state)}))
    assert isinstance(taken, Taken) and taken.session is not None
    assert taken.session.state == state
    assert taken.session.exit_reason == "product_closed"
    assert taken.session.session_id == "sess-1" and taken.session.trial_id == "t-1"


def test_ids_from_resource_and_conversation_id() -> None:
    spans = agent_trace(root_attrs={})
    root = spans[-1]
    del root.attributes[:]
    root.attributes.extend(
        span(
            1,
            1,
            None,
            "x",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.conversation.id": "conv-9",
                "passk.exit_reason": "handed_off",
            },
        ).attributes
    )
    resource = {k: v for k, v in PASSK.items() if k.startswith("passk.") and "exit" not in k}
    taken = _one(*spans, resource=resource)
    assert isinstance(taken, Taken)
    assert taken.conversation.session_id == "conv-9"
    assert taken.conversation.trial_id == "t-1"
    assert taken.conversation.exit_reason == "handed_off"


@pytest.mark.parametrize(
    ("root_attrs", "reason"),
    [
        ({"gen_ai.operation.name": "chat"}, "no_invoke_agent_root"),
        ({"passk.trial_id": ""}, "no_passk_ids"),
        ({"passk.exit_reason": ""}, "no_exit_reason"),
        ({"passk.session.state": "[1, 2]"}, "bad_session_state"),
    ],
)
def test_traces_that_are_not_trials_say_why(root_attrs, reason) -> None:  # type: ignore[no-untyped-def]
    result = _one(*agent_trace(root_attrs=root_attrs))
    assert isinstance(result, Skipped) and result.reason == reason, result


def test_a_trace_without_its_root_is_incomplete() -> None:
    result = _one(*agent_trace()[:-1])
    assert isinstance(result, Skipped) and result.reason == "incomplete"


def test_no_message_content_is_skipped_with_the_hint() -> None:
    spans = [
        span(1, 2, 1, "chat", {"gen_ai.operation.name": "chat"}),
        span(1, 1, None, "invoke_agent", {"gen_ai.operation.name": "invoke_agent", **PASSK}),
    ]
    result = _one(*spans)
    assert isinstance(result, Skipped) and result.reason == "no_messages"
    assert "content capture" in result.detail


def test_the_older_per_message_events_make_the_transcript() -> None:
    events = [
        ("gen_ai.system.message", {"content": "Be brief."}),
        ("gen_ai.user.message", {"content": "Job 4112."}),
        (
            "gen_ai.choice",
            {
                "gen_ai.event.content": json.dumps(
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "Noted."},
                    }
                )
            },
        ),
        (
            "gen_ai.choice",
            {
                "gen_ai.event.content": json.dumps(
                    {"index": 1, "message": {"content": "other choice"}}
                )
            },
        ),
    ]
    chat = span(1, 2, 1, "chat", {"gen_ai.operation.name": "chat"}, events=events)
    assert _transcript(chat) == [
        ("system", "Be brief."),
        ("user", "Job 4112."),
        ("assistant", "Noted."),
    ]


def test_the_last_chat_span_wins_and_system_instructions_lead() -> None:
    early = chat_attrs([{"role": "user", "parts": [{"type": "text", "content": "a"}]}], [])
    late = chat_attrs(
        [{"role": "user", "parts": [{"type": "text", "content": "b"}]}],
        [
            {"role": "assistant", "parts": [{"type": "text", "content": "c"}]},
            {"role": "assistant", "parts": [{"type": "text", "content": "alt"}]},
        ],
    )
    late["gen_ai.system_instructions"] = json.dumps([{"type": "text", "content": "sys"}])
    chats = span(1, 3, 1, "chat", late, 5, 9), span(1, 2, 1, "chat", early, 1, 4)
    assert _transcript(*chats) == [("system", "sys"), ("user", "b"), ("assistant", "c")]


def test_a_root_that_reports_total_usage_is_not_counted_twice() -> None:
    taken = _one(*agent_trace(root_attrs={"gen_ai.usage.input_tokens": 40}))
    assert isinstance(taken, Taken) and taken.conversation.metrics is not None
    assert taken.conversation.metrics.input_tokens == 40
