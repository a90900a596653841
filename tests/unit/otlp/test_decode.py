"""OTLP bodies and files: protobuf, JSON with hex ids, gzip, and what is refused."""

from __future__ import annotations

import gzip
import json

import pytest

from services.otlp.decode import PayloadError, from_body, gunzip, read_file
from services.otlp.mapping import spans_of
from tests.unit.otlp.spans import agent_trace, otlp_json, request


def test_protobuf_and_json_decode_to_the_same_spans() -> None:
    req = request(*agent_trace())
    from_pb = list(spans_of(from_body(req.SerializeToString(), "application/x-protobuf")))
    from_js = list(spans_of(from_body(json.dumps(otlp_json(req)).encode(), "application/json")))
    assert from_pb == from_js
    assert {s.trace_id for s in from_js} == {f"{1:032x}"}


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"\x0a\xff\xff\xff\xff\x0f", "application/x-protobuf"),
        (b"{not json", "application/json"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            "application/json",
        ),
        (b'{"resourceSpans": 3}', "application/json"),
    ],
)
def test_malformed_payloads_are_refused(body: bytes, kind: str) -> None:
    with pytest.raises(PayloadError):
        from_body(body, kind)


def test_a_gzip_bomb_stops_at_the_limit() -> None:
    bomb = gzip.compress(b"\0" * 5_000_000)
    assert len(bomb) < 10_000
    with pytest.raises(OverflowError):
        gunzip(bomb, limit=1_000_000)
    assert gunzip(gzip.compress(b"abc"), limit=10) == b"abc"


def test_files_json_lines_and_protobuf(tmp_path) -> None:  # type: ignore[no-untyped-def]
    spans = agent_trace()
    lines = tmp_path / "traces.jsonl"
    lines.write_text("\n".join(json.dumps(otlp_json(request(s))) for s in spans) + "\nnope\n")
    got = list(read_file(lines))
    assert len(got) == 5 and isinstance(got[-1][1], PayloadError) and got[-1][0].endswith(":5")
    pb = tmp_path / "traces.binpb"
    pb.write_bytes(request(*spans).SerializeToString())
    [(where, req)] = list(read_file(pb))
    assert not isinstance(req, PayloadError) and len(list(spans_of(req))) == 4
