"""Nothing dropped in silence: a trace the receiver or the importer did not take becomes a
dead letter (DESIGN.md, "Production traffic"): source `otlp`, key the trace id, the reason
(no_matching_scenario, no_messages, too_many_spans, idle, ...) and a short excerpt of the
trace (its root span's name and attributes, capped), never the whole trace: a trace may be
megabytes, and the letters of a flood must stay small. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from schemas.events import DeadLetter
from services.contract.codec import Rejection
from services.contract.deadletter import dead_letter
from services.otlp.mapping import Span, root_of

SOURCE = "otlp"
EXCERPT_BYTES = 1024  # what a letter keeps of a trace
ATTRIBUTE_CHARS = 120  # of each attribute value in the excerpt


def excerpt(spans: Sequence[Span]) -> bytes:
    """The trace in a few hundred bytes: root (or first) span name, its attributes and its
    resource's (values cut), and how many spans came."""
    head = root_of(spans) or (spans[0] if spans else None)
    if head is None:
        return b"{}"
    cut = {k: str(v)[:ATTRIBUTE_CHARS] for k, v in {**head.resource, **head.attributes}.items()}
    body = {
        "span": head.name[:ATTRIBUTE_CHARS],
        "root": head.is_root,
        "spans": len(spans),
        "attributes": cut,
    }
    raw = json.dumps(body, sort_keys=True, ensure_ascii=False).encode()
    return raw if len(raw) <= EXCERPT_BYTES else raw[: EXCERPT_BYTES - 3] + b"..."


def trace_letter(
    trace_id: str, reason: str, detail: str, spans: Sequence[Span], *, processor: str
) -> DeadLetter:
    """The dead letter of one trace not taken. Its id is deterministic (trace, reason,
    excerpt): the same trace sent or imported again is the same letter."""
    letter = dead_letter(
        processor=processor,
        source_topic=SOURCE,
        partition=None,
        offset=None,
        key=trace_id.encode(),
        value=excerpt(spans),
        rejection=Rejection(reason, detail),
    )
    return letter.model_copy(update={"event_id": f"{letter.event_id}:{trace_id}:{reason}"})
