"""OTLP trace payloads to `opentelemetry-proto` messages: protobuf or JSON, gzip or not.

OTLP/JSON differs from protobuf's canonical JSON mapping in one place: trace and span ids
are hex, not base64 (OTLP spec, "JSON Protobuf Encoding"). They are turned into base64
before `json_format.ParseDict`, which then does all the parsing; unknown fields are
ignored, as the spec asks of receivers.
"""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


class PayloadError(ValueError):
    """A body or file line that is not an OTLP trace export."""


def gunzip(body: bytes, *, limit: int) -> bytes:
    """Inflate at most `limit` bytes: a small gzip bomb must not become a large body."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise PayloadError(f"not gzip: {exc}") from None
    if len(out) > limit:
        raise OverflowError(f"inflated body larger than {limit} bytes")
    return out


def _hex_ids_to_base64(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str) and value:
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
                except ValueError:
                    raise PayloadError(f"{key} {value[:40]!r} is not hex") from None
            else:
                _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item)


def from_json(data: bytes | str | dict[str, Any]) -> ExportTraceServiceRequest:
    try:
        tree = json.loads(data) if isinstance(data, bytes | str) else data
    except (ValueError, UnicodeDecodeError) as exc:
        raise PayloadError(f"not JSON: {exc}") from None
    if not isinstance(tree, dict):
        raise PayloadError("not a JSON object")
    _hex_ids_to_base64(tree)
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(tree, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise PayloadError(f"not an OTLP trace export: {exc}") from None
    return request


def from_protobuf(data: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(data)
    except (DecodeError, RuntimeWarning) as exc:
        raise PayloadError(f"not OTLP protobuf: {exc}") from None
    return request


def from_body(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    kind = content_type.split(";")[0].strip().lower()
    if kind == "application/json":
        return from_json(body)
    if kind in ("application/x-protobuf", "application/protobuf", ""):
        return from_protobuf(body)
    raise PayloadError(f"unsupported content type {content_type!r}")


def read_file(path: Path) -> Iterator[tuple[str, ExportTraceServiceRequest | PayloadError]]:
    """Each export in a file, with where it was: JSON lines (the Collector's file exporter,
    one ExportTraceServiceRequest per line) or one protobuf message (`.pb`, `.binpb`,
    `.protobuf`, or anything that is not JSON). gzip files are inflated first."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if raw.lstrip()[:1] in (b"{", b"["):
        for number, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{number}", from_json(line)
            except PayloadError as exc:
                yield f"{path}:{number}", exc
        return
    try:
        yield str(path), from_protobuf(raw)
    except PayloadError as exc:
        yield str(path), exc
