"""Hand-built OTLP requests for the mapping and receiver tests."""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

T0 = 1_767_000_000_000_000_000


def otlp_json(request: Message) -> dict[str, Any]:
    """An OTLP request as OTLP/JSON exporters and collectors write it: hex trace and span
    ids (protobuf's own JSON mapping gives base64)."""
    tree = json_format.MessageToDict(request)
    for rs in tree["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        s[key] = base64.b64decode(s[key]).hex()
    return tree


def kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def span(
    trace: int,
    span_id: int,
    parent: int | None,
    name: str,
    attrs: dict[str, Any],
    start_ms: int = 0,
    end_ms: int = 10,
    events: list[tuple[str, dict[str, Any]]] = (),
) -> PbSpan:
    s = PbSpan(
        trace_id=trace.to_bytes(16, "big"),
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=name,
        start_time_unix_nano=T0 + start_ms * 1_000_000,
        end_time_unix_nano=T0 + end_ms * 1_000_000,
        attributes=[kv(k, v) for k, v in attrs.items()],
    )
    for i, (event, eattrs) in enumerate(events):
        e = s.events.add(name=event, time_unix_nano=T0 + i)
        e.attributes.extend(kv(k, v) for k, v in eattrs.items())
    return s


def request(*spans: PbSpan, resource: dict[str, Any] | None = None) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend(kv(k, v) for k, v in (resource or {}).items())
    rs.scope_spans.add().spans.extend(spans)
    return req


PASSK = {
    "passk.run_id": "run-1",
    "passk.scenario_id": "debrief",
    "passk.trial_id": "t-1",
    "session.id": "sess-1",
    "passk.exit_reason": "product_closed",
}


def chat_attrs(
    inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], tokens=(10, 5)
) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps(inputs),
        "gen_ai.output.messages": json.dumps(outputs),
        "gen_ai.usage.input_tokens": tokens[0],
        "gen_ai.usage.output_tokens": tokens[1],
    }


def agent_trace(trace: int = 1, root_attrs: dict[str, Any] | None = None) -> list[PbSpan]:
    """A root invoke_agent span, two chat spans and a tool span."""
    user = {"role": "user", "parts": [{"type": "text", "content": "Job 4112."}]}
    call = {
        "role": "assistant",
        "parts": [
            {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"job": "4112"}}
        ],
    }
    result = {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "c1", "response": "washer"}],
    }
    final = {
        "role": "assistant",
        "parts": [{"type": "text", "content": "Done."}],
        "finish_reason": "stop",
    }
    root = {"gen_ai.operation.name": "invoke_agent", **PASSK, **(root_attrs or {})}
    return [
        span(trace, 2, 1, "chat", chat_attrs([user], [call]), 1, 3),
        span(
            trace,
            3,
            1,
            "execute_tool lookup",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.id": "c1",
                "gen_ai.tool.call.arguments": '{"job": "4112"}',
                "gen_ai.tool.call.result": "washer",
            },
            3,
            4,
        ),
        span(trace, 4, 1, "chat", chat_attrs([user, call, result], [final], (30, 2)), 4, 8),
        span(trace, 1, None, "invoke_agent debrief", root, 0, 1500),
    ]


def plain_trace(trace: int = 1, root_attrs: dict[str, Any] | None = None) -> list[PbSpan]:
    """`agent_trace` as a production service writes it: no passk attribute at all."""
    spans = agent_trace(trace)
    root = spans[-1]
    del root.attributes[:]
    root.attributes.extend(
        kv(k, v) for k, v in {"gen_ai.operation.name": "invoke_agent", **(root_attrs or {})}.items()
    )
    return spans
