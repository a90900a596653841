"""The receiver's memory: spans held per trace until the trace's root span arrives, with
every bound hostile input could exceed enforced (traces held, spans per trace, idle time),
and a bounded memory of traces already published so spans sent again publish nothing.

Pure and clock-injected: `add` and `expire` return what became complete or was dropped.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from services.otlp.mapping import Span

DropReason = Literal[
    "too_many_pending_traces",
    "too_many_pending_bytes",
    "idle",
    "too_many_spans",
    "already_published",
]


@dataclass(frozen=True)
class Bounds:
    max_pending_traces: int = 10_000
    idle_s: float = 300.0
    max_spans_per_trace: int = 2_000
    seen_traces: int = 100_000  # completed trace ids remembered against repeats
    # Bytes (protobuf size) of the spans held: a few traces of huge spans must not hold
    # gigabytes while their root never comes.
    max_pending_bytes: int = 64_000_000


@dataclass
class _Held:
    spans: dict[str, Span] = field(default_factory=dict)  # span_id -> span (repeats collapse)
    last_seen: float = 0.0
    size: int = 0  # bytes of its spans


@dataclass
class Outcome:
    complete: list[list[Span]] = field(default_factory=list)
    dropped: list[tuple[str, DropReason, int]] = field(default_factory=list)  # trace, why, spans
    # The spans of each held trace given up (once per trace): what its dead letter quotes.
    given_up: list[tuple[str, DropReason, list[Span]]] = field(default_factory=list)

    def extend(self, other: Outcome) -> None:
        self.complete += other.complete
        self.dropped += other.dropped
        self.given_up += other.given_up


class PendingTraces:
    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self._held: OrderedDict[str, _Held] = OrderedDict()  # least recently seen first
        self._done: OrderedDict[str, None] = OrderedDict()
        # over a bound: the rest of the trace is ignored, for the same reason
        self._dropped: OrderedDict[str, DropReason] = OrderedDict()
        self.bytes = 0  # of every span held

    def __len__(self) -> int:
        return len(self._held)

    def _release(self, tid: str) -> _Held:
        held = self._held.pop(tid)
        self.bytes -= held.size
        return held

    def already_done(self, trace_id: str) -> bool:
        return trace_id in self._done

    def forget(self, trace_id: str) -> None:
        """A completed trace that could not be published: a resend may complete it again."""
        self._done.pop(trace_id, None)

    def _remember(self, memory: OrderedDict[str, Any], trace_id: str, value: Any = None) -> None:
        memory[trace_id] = value
        memory.move_to_end(trace_id)
        while len(memory) > self.bounds.seen_traces:
            memory.popitem(last=False)

    def add(self, spans: Iterable[Span], now: float) -> Outcome:
        out = self.expire(now)
        # A batch's roots last: a root listed before its children still completes a trace
        # that holds them.
        for span in sorted(spans, key=lambda s: s.is_root):
            tid = span.trace_id
            if tid in self._done:
                out.dropped.append((tid, "already_published", 1))
                continue
            if tid in self._dropped:
                out.dropped.append((tid, self._dropped[tid], 1))
                continue
            held = self._held.get(tid)
            if held is None:
                if len(self._held) >= self.bounds.max_pending_traces:
                    # The oldest-seen trace makes room: a flood of open traces cannot
                    # push out the one that is about to complete.
                    old = next(iter(self._held))
                    gone = self._release(old)
                    out.dropped.append((old, "too_many_pending_traces", len(gone.spans)))
                    out.given_up.append(
                        (old, "too_many_pending_traces", list(gone.spans.values())[:1])
                    )
                held = self._held[tid] = _Held()
            repeat = held.spans.get(span.span_id)
            held.spans[span.span_id] = span
            grown = span.size - (repeat.size if repeat is not None else 0)
            held.size += grown
            self.bytes += grown
            held.last_seen = now
            self._held.move_to_end(tid)
            if len(held.spans) > self.bounds.max_spans_per_trace:
                self._release(tid)
                self._remember(self._dropped, tid, "too_many_spans")
                out.dropped.append((tid, "too_many_spans", len(held.spans)))
                out.given_up.append((tid, "too_many_spans", list(held.spans.values())[:1]))
                continue
            if span.is_root:
                self._release(tid)
                self._remember(self._done, tid)
                out.complete.append(list(held.spans.values()))
                continue
            # Past the byte bound the least recently seen traces go, this one last.
            while self.bytes > self.bounds.max_pending_bytes and self._held:
                old = next(iter(self._held))
                gone = self._release(old)
                out.dropped.append((old, "too_many_pending_bytes", len(gone.spans)))
                out.given_up.append((old, "too_many_pending_bytes", list(gone.spans.values())[:1]))
                if old == tid:
                    # its next spans are refused too
                    self._remember(self._dropped, tid, "too_many_pending_bytes")
        return out

    def expire(self, now: float) -> Outcome:
        out = Outcome()
        while self._held:
            tid, held = next(iter(self._held.items()))
            if now - held.last_seen < self.bounds.idle_s:
                break
            self._release(tid)
            out.dropped.append((tid, "idle", len(held.spans)))
            out.given_up.append((tid, "idle", list(held.spans.values())[:1]))
        return out
