"""The mapping on traces the official openai-v2 instrumentation wrote (not hand-built):
the transcript is the one the agent itself kept; with content capture off, or set to
`true` (not a valid value for the pinned instrumentation), the trace is skipped as
`no_messages`, saying why."""

from __future__ import annotations

import os

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.otlp.mapping import Skipped, Taken, assemble, by_trace, spans_of
from tests.otel_agent import Agent, Trial, chat_server
from tests.support import free_ports


def _run(capture: str) -> tuple[Taken | Skipped, list[dict]]:  # type: ignore[type-arg]
    memory = InMemorySpanExporter()
    old = os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"]
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = capture
    try:
        with chat_server(free_ports(1)) as url:
            agent = Agent(url, [memory])
            try:
                kept = agent.run(
                    Trial(
                        "r",
                        "s",
                        "r:s:001",
                        "sess-1",
                        ["Hi, job 4112.", "Pump replaced."],
                        state={"report": {"fault": "pump"}},
                    )
                )
            finally:
                agent.shutdown()
    finally:
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = old
    [trace] = by_trace(spans_of(encode_spans(memory.get_finished_spans()))).values()
    return assemble(trace), kept


def test_the_transcript_is_the_one_the_agent_kept() -> None:
    result, kept = _run("span_only")
    assert isinstance(result, Taken), result
    got = [m.model_dump(exclude_none=True) for m in result.conversation.transcript]
    for m in kept:  # the agent's own copy, in OpenAI chat format
        for call in m.get("tool_calls", []):
            call.pop("index", None)
    assert got == kept
    assert result.session is not None and result.session.state == {"report": {"fault": "pump"}}
    assert result.conversation.model_dump()["otel_tool_calls"][0]["name"] == "lookup_job"


@pytest.mark.parametrize("capture", ["true", "no_content"])
def test_without_captured_content_the_trace_is_skipped_saying_why(capture: str) -> None:
    result, _ = _run(capture)
    assert isinstance(result, Skipped) and result.reason == "no_messages"
