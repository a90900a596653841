"""Bytes on the wire <-> event models, with a named reason for everything refused.

Processors read raw bytes and decode here, so a message that cannot be used becomes a
`Rejection` (sent to the dead-letter topic) instead of an exception inside Faust.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json

from schemas.events import SCHEMA_VERSION

if TYPE_CHECKING:
    from services.contract.settings import Settings

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Rejection:
    reason: str  # low-cardinality, used as a metric label
    detail: str


def encode(event: BaseModel) -> bytes:
    return event.model_dump_json().encode("utf-8")


def _describe(exc: ValidationError) -> Rejection:
    errors = exc.errors()
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "(root)"
    kinds = {e["type"] for e in errors}
    if kinds == {"missing"}:
        reason = "missing_field"
    elif any(e["type"] == "literal_error" and e.get("loc") == ("type",) for e in errors):
        # Another event type on this topic: say so, not which of its fields are missing.
        reason = "wrong_type"
    else:
        reason = "invalid_field"
    detail = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ())) or '(root)'}: {e['msg']}" for e in errors[:5]
    )
    if len(errors) > 5:
        detail += f"; and {len(errors) - 5} more"
    return Rejection(reason, detail or f"{where}: invalid")


def nesting_depth(data: object, limit: int) -> int:
    """How deeply `data` nests, counted without recursion and given up just past `limit`
    (a parsed document can be deep enough to overflow any recursive walk over it)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Iterable[object] = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


_UNPARSED = object()


def _parsed(raw: bytes) -> object:
    """The JSON document, parsed by pydantic-core's parser (a third of `json.loads`'s
    time on a 2 KB event, every event of every processor); `_UNPARSED` when it refuses
    the input, which the standard library's parser then reads again to name the fault.
    Both parse valid JSON alike; NaN and Infinity (not JSON, though Python writes them)
    are refused by this one and named by the other; invalid UTF-8, lone surrogates and
    nesting past its own limit are left to the standard one."""
    try:
        return from_json(raw, allow_inf_nan=False)
    except ValueError:
        return _UNPARSED


class NonFinite(ValueError):
    pass


def _no_constant(name: str) -> object:
    raise NonFinite(f"{name} is not a number JSON allows (a non-finite value)")


# A number can only overflow to infinity with a large exponent or over 300 digits; only a
# document with one is walked for it (every event of every processor is decoded here).
_MAYBE_HUGE = re.compile(rb"[eE]\+?0*[1-9][0-9]{2}|[0-9]{300}")


def non_finite_at(data: object) -> str | None:
    """Where the first non-finite float is (1e400 parses to inf), without recursion."""
    stack: list[tuple[object, str]] = [(data, "(root)")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float):
            if not math.isfinite(node):
                return where
        elif isinstance(node, dict):
            stack.extend(
                (v, f"{where}.{k}" if where != "(root)" else str(k)) for k, v in node.items()
            )
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
    return None


def _too_deep(limit: int, found: str) -> Rejection:
    return Rejection(
        "too_deep", f"JSON nests {found} levels deep; the limit is {limit} (PASSK_MAX_JSON_DEPTH)"
    )


def decode(
    raw: bytes | None, model: type[M], *, max_bytes: int = 1_000_000, max_depth: int = 64
) -> M | Rejection:
    """Decode one message into `model`, or say precisely why it cannot be used.

    Nesting deeper than `max_depth` is refused before validation: deep documents make
    recursive code (the JSON parser, pydantic, a table's serializer) raise RecursionError."""
    if raw is None:
        return Rejection("empty", "message has no value (tombstone)")
    if not raw:
        return Rejection("empty", "message value is 0 bytes")
    if len(raw) > max_bytes:
        return Rejection("oversized", f"{len(raw)} bytes exceeds the limit of {max_bytes}")
    data = _parsed(raw)
    if data is _UNPARSED:  # the standard parser says precisely what is wrong
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return Rejection("invalid_utf8", str(exc))
        try:
            data = json.loads(text, parse_constant=_no_constant)
        except NonFinite as exc:
            return Rejection("non_finite_number", str(exc))
        except json.JSONDecodeError as exc:
            return Rejection("invalid_json", str(exc))
        except RecursionError:
            return _too_deep(max_depth, "more than the parser can follow")
    # A document that opens at most `max_depth` objects and lists in all cannot nest
    # deeper (brackets inside strings only over-count): the walk is for the others.
    if (
        raw.count(b"{") + raw.count(b"[") > max_depth
        and (depth := nesting_depth(data, max_depth)) > max_depth
    ):
        return _too_deep(max_depth, f"at least {depth}")
    if _MAYBE_HUGE.search(raw) and (where := non_finite_at(data)) is not None:
        return Rejection(
            "non_finite_number", f"{where}: a number too large for a float (it reads as infinity)"
        )
    if not isinstance(data, dict):
        return Rejection("not_an_object", f"expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    # `true == 1` in Python; a boolean is not a version.
    if "schema_version" in data and (isinstance(version, bool) or version != SCHEMA_VERSION):
        return Rejection(
            "unknown_schema_version",
            f"schema_version {version!r} is not supported (this worker reads {SCHEMA_VERSION})",
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        return _describe(exc)


def decode_or_reject(raw: bytes | None, model: type[M], settings: Settings) -> M | Rejection:
    """`decode` within the bounds the settings set for every input (PASSK_MAX_EVENT_BYTES,
    PASSK_MAX_JSON_DEPTH): the model, or the Rejection that makes the record a dead letter."""
    return decode(raw, model, max_bytes=settings.max_event_bytes, max_depth=settings.max_json_depth)
