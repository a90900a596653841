"""`passk dead-letters`: letters read, filtered, counted and shown in the documented shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas.events import DeadLetter
from services.contract.codec import encode
from services.otlp.dropped import trace_letter
from services.otlp.mapping import by_trace, spans_of
from services.report.dead_letters import select
from tests.unit.otlp.spans import plain_trace, request


def _letters() -> list[bytes]:
    spans = next(
        iter(by_trace(spans_of(request(*plain_trace(5), resource={"service.name": "x"}))).values())
    )
    old = trace_letter(
        f"{5:032x}", "no_matching_scenario", "no match", spans, processor="otlp-receiver"
    ).model_copy(update={"occurred_at": datetime.now(UTC) - timedelta(days=2)})
    new = trace_letter(f"{6:032x}", "no_messages", "no chat span", spans, processor="import-otel")
    refused = DeadLetter(
        event_id="dl:1",
        source_topic="passk.conversation-finished.v1",
        value_b64="e30=",
        reason="invalid_json",
        detail="bad",
        processor="gate",
    )
    return [encode(old), encode(new), encode(refused), b"not a letter"]


def test_every_letter_is_listed_with_reason_source_key_and_excerpt() -> None:
    listing = select(_letters(), since=None, reason=None, limit=10)
    body = listing.as_json()
    assert set(body) == {"dead_letters", "counts"}
    assert body["counts"] == {"invalid_json": 1, "no_matching_scenario": 1, "no_messages": 1}
    assert all(set(x) == {"reason", "source", "key", "at", "excerpt"} for x in body["dead_letters"])
    first = body["dead_letters"][0]
    assert (first["reason"], first["source"], first["key"]) == (
        "no_matching_scenario",
        "otlp",
        f"{5:032x}",
    )
    assert "service.name" in first["excerpt"] and first["at"].endswith("Z")
    assert listing.unreadable == 1


def test_since_reason_and_limit_filter() -> None:
    recent = select(_letters(), since=datetime.now(UTC) - timedelta(hours=1), reason=None, limit=10)
    assert sorted(recent.counts) == ["invalid_json", "no_messages"]
    only = select(_letters(), since=None, reason="no_messages", limit=10)
    assert [x.reason for x in only.letters] == ["no_messages"]
    capped = select(_letters(), since=None, reason=None, limit=1)
    assert len(capped.letters) == 1 and sum(capped.counts.values()) == 3
