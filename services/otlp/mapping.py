"""Agent traces (OpenTelemetry GenAI semantic conventions, see semconv.py) to passk's input
events. Pure: spans in, a `Taken` (ConversationFinished and maybe SessionPersisted) or a
`Skipped` (reason and detail) out; no I/O, tested in milliseconds.

A trial is one trace whose root span (no parent) has gen_ai.operation.name = invoke_agent;
the trace is complete when that root span has arrived (a span is exported when it ends).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status
from pydantic import ValidationError

from schemas.events import ConversationFinished, Message, SessionPersisted, TrialMetrics
from schemas.scenario import Scenario
from services.grading.production import choose, run_id_for
from services.otlp import semconv as sc

SkipReason = Literal[
    "no_invoke_agent_root",
    "no_passk_ids",
    "no_messages",
    "no_exit_reason",
    "bad_session_state",
    "invalid_event",
    "incomplete",
    "no_matching_scenario",
]
# The exit of a production trace that names none (passk.exit_reason, exit_attribute).
UNKNOWN_EXIT = "unknown"


def any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in pairs}


@dataclass(frozen=True)
class SpanEvent:
    name: str
    time_unix_nano: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Span:
    """One span, flattened with its resource's attributes."""

    trace_id: str  # hex
    span_id: str
    parent_span_id: str
    name: str
    start_unix_nano: int
    end_unix_nano: int
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    status_error: bool = False
    size: int = 0  # bytes of the span as protobuf: what the receiver's pending bound counts

    @property
    def operation(self) -> str | None:
        op = self.attributes.get(sc.OPERATION)
        return op if isinstance(op, str) else None

    @property
    def is_root(self) -> bool:
        return not self.parent_span_id


def spans_of(request: ExportTraceServiceRequest) -> Iterator[Span]:
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                yield Span(
                    trace_id=s.trace_id.hex(),
                    span_id=s.span_id.hex(),
                    parent_span_id=s.parent_span_id.hex(),
                    name=s.name,
                    start_unix_nano=s.start_time_unix_nano,
                    end_unix_nano=s.end_time_unix_nano,
                    attributes=attributes(s.attributes),
                    resource=resource,
                    events=tuple(
                        SpanEvent(e.name, e.time_unix_nano, attributes(e.attributes))
                        for e in s.events
                    ),
                    status_error=s.status.code == Status.STATUS_CODE_ERROR,
                    size=s.ByteSize(),
                )


def root_of(spans: Iterable[Span]) -> Span | None:
    return next((s for s in spans if s.is_root), None)


@dataclass(frozen=True)
class Taken:
    trace_id: str
    conversation: ConversationFinished
    session: SessionPersisted | None = None


@dataclass(frozen=True)
class Skipped:
    trace_id: str
    reason: SkipReason
    detail: str = ""


# ------------------------------------------------------------------ messages


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def messages_from_parts(items: Any) -> list[Message]:
    """v1.37 `{role, parts}` messages (input, output or system instructions) in OpenAI
    chat format: text parts joined, tool_call parts as tool_calls, each
    tool_call_response part a tool message."""
    out: list[Message] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        role = item.get("role") or "assistant"
        raw_parts = item.get("parts")
        parts: list[Any] = raw_parts if isinstance(raw_parts, list) else []
        texts = [
            p["content"]
            for p in parts
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("content"), str)
        ]
        calls = [
            {
                "id": p.get("id"),
                "type": "function",
                "function": {"name": p.get("name"), "arguments": _text(p.get("arguments"))},
            }
            for p in parts
            if isinstance(p, dict) and p.get("type") == "tool_call"
        ]
        responses = [
            p for p in parts if isinstance(p, dict) and p.get("type") == "tool_call_response"
        ]
        if role == "tool" or responses:
            for p in responses:
                out.append(
                    Message(role="tool", content=_text(p.get("response")), tool_call_id=p.get("id"))
                )
            continue
        if role not in ("system", "user", "assistant"):
            continue
        out.append(
            Message(
                role=role, content="\n".join(texts) if texts else None, tool_calls=calls or None
            )
        )
    return out


def _system_messages(value: Any) -> list[Message]:
    parts = _json(value)
    if not isinstance(parts, list):
        return []
    texts = [
        p["content"]
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("content"), str)
    ]
    return [Message(role="system", content="\n".join(texts))] if texts else []


def _event_body(event: SpanEvent) -> dict[str, Any]:
    """A v1.30 message event carried as a span event: its body as `gen_ai.event.content`
    (JSON) or its fields as attributes."""
    body = _json(event.attributes.get("gen_ai.event.content"))
    return body if isinstance(body, dict) else dict(event.attributes)


def _legacy_message(body: dict[str, Any], role: str) -> Message:
    calls = _json(body.get("tool_calls"))
    content = body.get("content")
    return Message(
        role=body.get("role") or role,
        content=None if content is None else _text(content),
        tool_calls=calls if isinstance(calls, list) and calls else None,
        tool_call_id=body.get("id") if role == "tool" else None,
    )


def messages_from_events(events: Iterable[SpanEvent]) -> list[Message]:
    out: list[Message] = []
    for event in sorted(events, key=lambda e: e.time_unix_nano):
        if event.name in sc.MESSAGE_EVENTS:
            out.append(_legacy_message(_event_body(event), sc.MESSAGE_EVENTS[event.name]))
        elif event.name == sc.CHOICE_EVENT:
            body = _event_body(event)
            if body.get("index", 0) not in (0, "0"):
                continue
            message = _json(body.get("message"))
            out.append(_legacy_message(message if isinstance(message, dict) else body, "assistant"))
    return out


def transcript_of(chat: Span) -> list[Message]:
    inputs, outputs = (
        _json(chat.attributes.get(sc.INPUT_MESSAGES)),
        _json(chat.attributes.get(sc.OUTPUT_MESSAGES)),
    )
    if isinstance(inputs, list) or isinstance(outputs, list):
        system = _system_messages(chat.attributes.get(sc.SYSTEM_INSTRUCTIONS))
        first_output = outputs[:1] if isinstance(outputs, list) else []
        return system + messages_from_parts(inputs) + messages_from_parts(first_output)
    return messages_from_events(chat.events)


# ------------------------------------------------------------------ trials


def _attr(key: str, *sources: dict[str, Any]) -> Any:
    for source in sources:
        value = source.get(key)
        if value not in (None, ""):
            return value
    return None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def tool_calls_of(spans: Iterable[Span]) -> list[dict[str, Any]]:
    """execute_tool spans, kept for debugging beside the transcript; never graded."""
    return [
        {
            "name": s.attributes.get(sc.TOOL_NAME),
            "id": s.attributes.get(sc.TOOL_CALL_ID),
            "arguments": s.attributes.get(sc.TOOL_CALL_ARGUMENTS),
            "result": s.attributes.get(sc.TOOL_CALL_RESULT),
            "duration_ms": max(s.end_unix_nano - s.start_unix_nano, 0) / 1e6,
            "error": s.status_error,
        }
        for s in sorted(spans, key=lambda s: s.start_unix_nano)
        if s.operation == sc.EXECUTE_TOOL
    ]


def _tokens(spans: list[Span], root: Span, key: str) -> int | None:
    # Chat spans carry the usage; a root that also reports a total would count it twice.
    values = [v for s in spans if s is not root and (v := _int(s.attributes.get(key))) is not None]
    if not values:
        return _int(root.attributes.get(key))
    return sum(values)


def event_id_for(trace_id: str, kind: str) -> str:
    """Deterministic from the trace: a trace sent again yields the same event ids."""
    return f"otel:{trace_id}:{kind}"


def _time(unix_nano: int) -> datetime:
    return datetime.fromtimestamp(unix_nano / 1e9, UTC)


def root_attributes(root: Span) -> dict[str, Any]:
    """What a `match` rule reads: the root span's attributes over its resource's."""
    return {**root.resource, **root.attributes}


@dataclass(frozen=True)
class _Identity:
    """Whose trial a trace is: passk's ids (run, scenario, trial), the session, and the
    production scenario whose `match` made it a trial (None for passk's own traces)."""

    ids: dict[str, str | None]
    session_id: str | None
    production: Scenario | None


def _identify(
    spans: list[Span], root: Span, trace_id: str, scenarios: Iterable[Scenario] | None
) -> _Identity | Skipped:
    """The trace's passk ids and session: from its attributes, else (with `scenarios`) from
    the production scenario whose `match` holds; Skipped when there are none."""
    everywhere = [root.attributes, root.resource, *(s.attributes for s in spans)]
    ids = {
        key: _str(_attr(key, root.attributes, root.resource))
        for key in (sc.RUN_ID, sc.SCENARIO_ID, sc.TRIAL_ID)
    }
    session_id = _str(_attr(sc.SESSION_ID, *everywhere) or _attr(sc.CONVERSATION_ID, *everywhere))
    production: Scenario | None = None
    if scenarios is not None and not any(ids.values()):
        production = choose(scenarios, root_attributes(root))
        if production is None:
            return Skipped(
                trace_id,
                "no_matching_scenario",
                "no passk ids, and no published scenario's match holds for "
                f"service.name={root_attributes(root).get('service.name')!r}",
            )
        ids = {
            sc.RUN_ID: run_id_for(production, root.start_unix_nano or root.end_unix_nano),
            sc.SCENARIO_ID: production.id,
            sc.TRIAL_ID: trace_id,
        }
        session_id = session_id or trace_id
    missing = [k for k, v in ids.items() if not v] + (
        [] if session_id else [f"{sc.SESSION_ID}|{sc.CONVERSATION_ID}"]
    )
    if missing:
        return Skipped(trace_id, "no_passk_ids", "missing " + ", ".join(missing))
    return _Identity(ids, session_id, production)


def _transcript(spans: list[Span], trace_id: str) -> list[Message] | Skipped:
    """The messages of the trace's last chat span; Skipped when no chat span has any."""
    chats = [s for s in spans if s.operation in sc.CHAT_OPERATIONS]
    transcript = (
        transcript_of(max(chats, key=lambda s: (s.end_unix_nano, s.start_unix_nano)))
        if chats
        else []
    )
    if not transcript:
        return Skipped(
            trace_id,
            "no_messages",
            f"{len(chats)} chat span(s), none with {sc.INPUT_MESSAGES} or message "
            "events (is message content capture on?)",
        )
    return transcript


def _exit_reason(root: Span, production: Scenario | None) -> str | None:
    """passk's exit reason attribute; else the production scenario's exit attribute; else
    "error" for a failed root; else, for production traffic, UNKNOWN_EXIT."""
    exit_reason = _str(_attr(sc.EXIT_REASON, root.attributes, root.resource))
    if exit_reason is None and production is not None and production.exit_attribute:
        exit_reason = _str(_attr(production.exit_attribute, root.attributes))
    if exit_reason is None and root.status_error:
        exit_reason = "error"
    if exit_reason is None and production is not None:
        exit_reason = UNKNOWN_EXIT  # never skipped for lacking passk's own attributes
    return exit_reason


def _conversation(
    spans: list[Span],
    root: Span,
    trace_id: str,
    who: _Identity,
    transcript: list[Message],
    exit_reason: str,
) -> ConversationFinished:
    """The trial's ConversationFinished (ValidationError when the trace's values do not
    make one)."""
    common: dict[str, Any] = {"otel_trace_id": trace_id, "otel_span_id": root.span_id}
    if who.production is not None:
        common["production"] = True
    return ConversationFinished(
        event_id=event_id_for(trace_id, "conversation"),
        occurred_at=_time(root.end_unix_nano or root.start_unix_nano),
        run_id=who.ids[sc.RUN_ID],
        scenario_id=who.ids[sc.SCENARIO_ID],
        trial_id=who.ids[sc.TRIAL_ID],
        session_id=who.session_id,
        agent_version=_str(
            _attr(sc.PASSK_AGENT_VERSION, root.attributes, root.resource)
            or _attr(sc.AGENT_VERSION, root.attributes)
            or _attr(sc.SERVICE_VERSION, root.resource)
        ),
        exit_reason=exit_reason,
        transcript=transcript,
        metrics=TrialMetrics(
            input_tokens=_tokens(spans, root, sc.INPUT_TOKENS),
            output_tokens=_tokens(spans, root, sc.OUTPUT_TOKENS),
            duration_ms=max(root.end_unix_nano - root.start_unix_nano, 0) / 1e6,
        ),
        otel_tool_calls=tool_calls_of(spans),
        **common,
    )


def _with_session(
    root: Span, trace_id: str, conversation: ConversationFinished, who: _Identity, exit_reason: str
) -> Taken | Skipped:
    """The trial taken, with its SessionPersisted when the root carries the session state
    (Skipped when that state is not a JSON object)."""
    raw_state = _attr(sc.SESSION_STATE, root.attributes, root.resource)
    if raw_state is None:
        return Taken(trace_id, conversation)
    state = _json(raw_state)
    if not isinstance(state, dict):
        return Skipped(trace_id, "bad_session_state", f"{sc.SESSION_STATE} is not a JSON object")
    session = SessionPersisted(
        event_id=event_id_for(trace_id, "session"),
        occurred_at=conversation.occurred_at,
        session_id=who.session_id,
        state=state,
        exit_reason=exit_reason,
        trial_id=conversation.trial_id,
        run_id=conversation.run_id,
        scenario_id=conversation.scenario_id,
        otel_trace_id=trace_id,
        otel_span_id=root.span_id,
    )
    return Taken(trace_id, conversation, session)


def assemble(spans: list[Span], scenarios: Iterable[Scenario] | None = None) -> Taken | Skipped:
    """One trace's spans to one trial's input events, or why not. `scenarios`: the
    published ones whose `match` rules make a trace with no passk ids a production trial
    (None: such a trace is skipped as `no_passk_ids`, as before production traffic)."""
    trace_id = spans[0].trace_id if spans else ""
    root = root_of(spans)
    if root is None:
        return Skipped(trace_id, "incomplete", "the root span never arrived")
    if root.operation != sc.INVOKE_AGENT:
        return Skipped(
            trace_id,
            "no_invoke_agent_root",
            f"root span {root.name!r} has {sc.OPERATION}={root.operation!r}",
        )
    who = _identify(spans, root, trace_id, scenarios)
    if isinstance(who, Skipped):
        return who
    transcript = _transcript(spans, trace_id)
    if isinstance(transcript, Skipped):
        return transcript
    exit_reason = _exit_reason(root, who.production)
    if exit_reason is None:
        return Skipped(trace_id, "no_exit_reason", f"root span has no {sc.EXIT_REASON}")
    try:
        conversation = _conversation(spans, root, trace_id, who, transcript, exit_reason)
    except ValidationError as exc:
        return Skipped(trace_id, "invalid_event", str(exc).splitlines()[0])
    return _with_session(root, trace_id, conversation, who, exit_reason)


def with_probed_session(taken: Taken, state: dict[str, Any], exit_reason: str | None) -> Taken:
    """A trial whose trace had no passk.session.state, with the session a state probe read
    from the product (its recorded exit, when it has one)."""
    cf = taken.conversation
    extra = cf.model_extra or {}
    session = SessionPersisted(
        event_id=event_id_for(taken.trace_id, "session"),
        occurred_at=cf.occurred_at,
        session_id=cf.session_id,
        state=state,
        exit_reason=exit_reason,
        trial_id=cf.trial_id,
        run_id=cf.run_id,
        scenario_id=cf.scenario_id,
        otel_trace_id=extra.get("otel_trace_id"),
        otel_span_id=extra.get("otel_span_id"),
    )
    return Taken(taken.trace_id, cf, session)


def by_trace(spans: Iterable[Span]) -> dict[str, list[Span]]:
    traces: dict[str, list[Span]] = {}
    for s in spans:
        traces.setdefault(s.trace_id, []).append(s)
    return traces
