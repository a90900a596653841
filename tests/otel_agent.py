"""Traces made by code nobody here wrote: an agent loop on the official openai client,
instrumented by opentelemetry-instrumentation-openai-v2 (message content on, latest GenAI
conventions), inside an invoke_agent span carrying passk's attributes, against a small
OpenAI-compatible server. Shared by the OTLP tests and bench/otlp_receiver.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.support import serve_in_thread

# Read when the instrumentation starts: set before it is imported. `span_only` with the
# latest conventions: with the pinned openai-v2 2.4b0 the value `true` captures nothing.
os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")


@contextmanager
def chat_server(port: int) -> Iterator[str]:
    """An OpenAI-compatible chat server: asks for the `lookup_job` tool once, then echoes.
    A user line containing `[[close]]` ends the conversation."""

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        messages = body["messages"]
        last = messages[-1]
        if (
            last["role"] == "user"
            and "job" in (last.get("content") or "").lower()
            and not any(m["role"] == "tool" for m in messages)
        ):
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{len(messages)}",
                        "type": "function",
                        "function": {
                            "name": "lookup_job",
                            "arguments": json.dumps({"job": "4112"}),
                        },
                    }
                ],
            }
            finish = "tool_calls"
        else:
            text = last.get("content") or ""
            message = {"role": "assistant", "content": f"Noted: {text}"}
            finish = "stop"
        return web.json_response(
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "test-agent"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {
                    "prompt_tokens": 10 * len(messages),
                    "completion_tokens": 7,
                    "total_tokens": 10 * len(messages) + 7,
                },
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    with serve_in_thread(app, port):
        yield f"http://127.0.0.1:{port}/v1"


@dataclass
class Trial:
    run_id: str
    scenario_id: str
    trial_id: str
    session_id: str
    user_lines: Sequence[str]
    exit_reason: str = "product_closed"
    state: dict[str, Any] | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    # A production trace: none of passk's attributes (ids, exit, state); `attrs` name the
    # rest (app.intent, app.exit_reason, session.id).
    plain: bool = False


class Agent:
    """One tracer provider per process (the instrumentation patches openai globally)."""

    _instrumented = False

    def __init__(
        self, base_url: str, exporters: Sequence[Any], *, service: str = "field-debrief-agent"
    ) -> None:
        from openai import OpenAI
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service, "service.version": "agent-1.4"})
        )
        for exporter in exporters:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        if Agent._instrumented:
            OpenAIInstrumentor().uninstrument()
        OpenAIInstrumentor().instrument(tracer_provider=self.provider)
        Agent._instrumented = True
        self.tracer = self.provider.get_tracer("tests.otel_agent")
        self.client = OpenAI(base_url=base_url, api_key="test", max_retries=0)

    def run(self, trial: Trial) -> list[dict[str, Any]]:
        """Runs the conversation; returns the transcript the agent itself kept."""
        from opentelemetry.trace import SpanKind

        system = {"role": "system", "content": "You take field debriefs."}
        messages: list[dict[str, Any]] = [system]
        attrs = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "debrief",
            "passk.run_id": trial.run_id,
            "passk.scenario_id": trial.scenario_id,
            "passk.trial_id": trial.trial_id,
            "session.id": trial.session_id,
            **trial.attrs,
        }
        if trial.plain:
            attrs = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "support",
                **trial.attrs,
            }
        with self.tracer.start_as_current_span(
            "invoke_agent debrief", kind=SpanKind.INTERNAL, attributes=attrs
        ) as root:
            self.last_trace_id = f"{root.get_span_context().trace_id:032x}"
            for line in trial.user_lines:
                messages.append({"role": "user", "content": line})
                while True:
                    reply = self.client.chat.completions.create(
                        model="test-agent",
                        messages=messages,
                        tools=[
                            {
                                "type": "function",
                                "function": {
                                    "name": "lookup_job",
                                    "parameters": {"type": "object"},
                                },
                            }
                        ],
                    )
                    message = reply.choices[0].message
                    entry = message.model_dump(exclude_none=True)
                    entry.pop("refusal", None)
                    messages.append(entry)
                    if not message.tool_calls:
                        break
                    for call in message.tool_calls:
                        with self.tracer.start_as_current_span(
                            "execute_tool lookup_job",
                            attributes={
                                "gen_ai.operation.name": "execute_tool",
                                "gen_ai.tool.name": call.function.name,
                                "gen_ai.tool.call.id": call.id,
                                "gen_ai.tool.call.arguments": call.function.arguments,
                            },
                        ) as t:
                            result = json.dumps({"job": "4112", "appliance": "washer"})
                            t.set_attribute("gen_ai.tool.call.result", result)
                        messages.append(
                            {"role": "tool", "tool_call_id": call.id, "content": result}
                        )
            if not trial.plain:
                root.set_attribute("passk.exit_reason", trial.exit_reason)
            if trial.state is not None and not trial.plain:
                root.set_attribute("passk.session.state", json.dumps(trial.state))
        return messages

    def shutdown(self) -> None:
        """Flush, and take the instrumentation off openai again (it patches globally)."""
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        self.provider.force_flush()
        if Agent._instrumented:
            OpenAIInstrumentor().uninstrument()
            Agent._instrumented = False
        self.provider.shutdown()
