"""Replaying a JSONL file of input events onto passk's input topics, in file order.

Each line is validated against the model its `type` names before anything is sent; a
line that cannot be used is reported with its number and reason and skipped, so a bad
line never reaches the topics. Valid lines are sent as they are written (the bytes of
the line), keyed by session_id: one producer, same key, same partition, so the order
of the file is the order on the broker.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from schemas.events import ConversationFinished, SessionPersisted
from services.contract.codec import Rejection, decode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.delivery import DeliveryReport, Undelivered

# What replay sends, by the `type` a line declares.
REPLAYABLE: dict[str, tuple[type[ConversationFinished] | type[SessionPersisted], Topic]] = {
    "conversation_finished": (ConversationFinished, Topic.CONVERSATION_FINISHED),
    "session_persisted": (SessionPersisted, Topic.SESSION_PERSISTED),
}

REPLAYED_TOPICS: tuple[Topic, ...] = tuple(topic for _, topic in REPLAYABLE.values())


@dataclass(frozen=True)
class ReplayLine:
    lineno: int
    event: ConversationFinished | SessionPersisted
    topic: Topic
    key: bytes
    value: bytes


@dataclass(frozen=True)
class SkippedLine:
    lineno: int
    reason: str  # short and low-cardinality, as the codec names them
    detail: str

    def __str__(self) -> str:
        return f"line {self.lineno}: {self.reason}: {self.detail}"


def parse_line(
    lineno: int, raw: bytes, *, max_bytes: int = 1_000_000, max_depth: int = 64
) -> ReplayLine | SkippedLine | None:
    """One line of the file: the event to send, why it is skipped, or None when blank."""
    value = raw.strip()
    if not value:
        return None
    try:
        data = json.loads(value.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return SkippedLine(lineno, "invalid_utf8", str(exc))
    except json.JSONDecodeError as exc:
        return SkippedLine(lineno, "invalid_json", str(exc))
    except RecursionError:
        return SkippedLine(lineno, "too_deep", "JSON nested deeper than the parser can follow")
    if not isinstance(data, dict):
        got = type(data).__name__
        return SkippedLine(lineno, "not_an_object", f"expected a JSON object, got {got}")
    kind = data.get("type")
    if kind not in REPLAYABLE:
        known = ", ".join(REPLAYABLE)
        return SkippedLine(lineno, "unknown_type", f"type {kind!r} is not one of: {known}")
    model, topic = REPLAYABLE[kind]
    decoded = decode(value, model, max_bytes=max_bytes, max_depth=max_depth)
    if isinstance(decoded, Rejection):
        return SkippedLine(lineno, decoded.reason, decoded.detail)
    return ReplayLine(lineno, decoded, topic, decoded.session_id.encode("utf-8"), value)


@dataclass(frozen=True)
class OverlongLine:
    """A line longer than the limit: counted and skipped, never held in memory whole."""

    length: int


CHUNK = 1 << 20


def read_lines(path: Path, max_line_bytes: int) -> Iterator[tuple[int, bytes | OverlongLine]]:
    """Every line of the file, in memory bounded by `max_line_bytes` whatever the file: a
    longer line is read past in chunks and reported by its length only."""
    with open(path, "rb") as handle:
        lineno = 0
        while True:
            line = handle.readline(max_line_bytes + 1)
            if not line:
                return
            lineno += 1
            if len(line) <= max_line_bytes or line.endswith(b"\n"):
                yield lineno, line
                continue
            yield lineno, OverlongLine(len(line) + _skip_line(handle))


def _skip_line(handle: BinaryIO) -> int:
    """Read past the rest of the current line; how many bytes it had, in one reused
    buffer whatever the line's length."""
    buffer = bytearray(CHUNK)
    skipped = 0
    while True:
        start = handle.tell()
        got = handle.readinto(buffer)  # type: ignore[attr-defined]
        if not got:
            return skipped
        newline = buffer.find(b"\n", 0, got)
        if newline >= 0:
            handle.seek(start + newline + 1)
            return skipped + newline + 1
        skipped += got


def count_lines(path: Path) -> int:
    """Lines in the file (a last line without a newline counts), read in fixed chunks
    into one reused buffer."""
    buffer = bytearray(CHUNK)
    count, last = 0, 10  # b"\n"
    with open(path, "rb") as handle:
        while got := handle.readinto(buffer):
            count += buffer.count(b"\n", 0, got)
            last = buffer[got - 1]
    return count + (last != 10)


class Pacer:
    """Spaces sends to at most `rate` per second on the monotonic clock (no drift, no burst)."""

    def __init__(
        self,
        rate: float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate is not None and rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._start: float | None = None
        self._count = 0

    def wait(self) -> None:
        if self.rate is None:
            return
        now = self._clock()
        if self._start is None:
            self._start = now
        due = self._start + self._count / self.rate
        if due > now:
            self._sleep(due - now)
        self._count += 1


@dataclass
class ReplaySummary:
    path: str
    dry_run: bool
    lines: int = 0
    blank: int = 0
    valid: Counter[str] = field(default_factory=Counter)  # topic name -> valid lines
    sent: dict[str, int] = field(default_factory=dict)  # topic name -> acknowledged
    skipped: list[SkippedLine] = field(default_factory=list)
    # valid lines not delivered (failed, never acknowledged, or never sent because the
    # replay was stopped), first line first
    undelivered: list[Undelivered] = field(default_factory=list)
    interrupted: bool = False  # stopped (SIGINT) before the end of the file
    last_line: int = 0  # the last line read (and, if valid, handed to the producer)

    @property
    def total_valid(self) -> int:
        return sum(self.valid.values())

    @property
    def delivered(self) -> int:
        return sum(self.sent.values())

    @property
    def exit_code(self) -> int:
        """0 when every valid line was delivered (skipped lines only warn); 130 when
        stopped; 4 when a valid line was not delivered (the broker did not take it); 3
        (nothing to judge) when no line of the file was valid."""
        if self.interrupted:
            return 130
        if self.undelivered:
            return 4
        return 0 if self.total_valid else 3


class Sender(Protocol):
    """What replay needs of a producer; TrafficProducer is one."""

    def send_raw(self, topic: str, key: bytes | None, value: bytes, *, ref: str = "") -> Any: ...

    def settle(self, timeout_s: float | None = None) -> bool: ...

    def report(self) -> DeliveryReport: ...


def replay_file(
    path: Path,
    *,
    sender: Sender | None,
    settings: Settings,
    rate: float | None = None,
    on_line: Callable[[int], None] | None = None,
    settle_timeout_s: float | None = None,
    stop_grace_s: float = 10.0,
    pacer: Pacer | None = None,
) -> ReplaySummary:
    """Send every valid line of `path` in file order; `sender=None` is a dry run.

    Then wait for the broker's acknowledgements, at most `settle_timeout_s` (default: the
    sender's own deadline). SIGINT (KeyboardInterrupt) stops the sending at the line it
    reached and waits at most `stop_grace_s` for what was sent (a second SIGINT: not at
    all); either way the summary says what was delivered and which line was the first
    not delivered."""
    summary = ReplaySummary(path=str(path), dry_run=sender is None)
    pacer = pacer or Pacer(rate)
    # A line may carry an event of up to max_event_bytes plus its newline and spaces.
    limit = settings.max_event_bytes + 1024
    try:
        for lineno, raw in read_lines(path, limit):
            summary.lines += 1
            if isinstance(raw, OverlongLine):
                parsed: ReplayLine | SkippedLine | None = SkippedLine(
                    lineno,
                    "oversized",
                    f"{raw.length} bytes exceeds the limit of {limit} (PASSK_MAX_EVENT_BYTES)",
                )
            else:
                parsed = parse_line(
                    lineno,
                    raw,
                    max_bytes=settings.max_event_bytes,
                    max_depth=settings.max_json_depth,
                )
            if parsed is None:
                summary.blank += 1
            elif isinstance(parsed, SkippedLine):
                summary.skipped.append(parsed)
            else:
                name = topic_name(parsed.topic, settings)
                if sender is not None:
                    pacer.wait()
                    sender.send_raw(name, parsed.key, parsed.value, ref=f"line {lineno}")
                summary.valid[name] += 1
            summary.last_line = lineno
            if on_line is not None:
                on_line(lineno)
    except KeyboardInterrupt:
        summary.interrupted = True
    if sender is not None:
        try:
            sender.settle(stop_grace_s if summary.interrupted else settle_timeout_s)
        except KeyboardInterrupt:
            summary.interrupted = True  # asked twice: what is left is reported as it is
        report = sender.report()
        summary.sent = report.acked
        summary.undelivered = list(report.undelivered)
    return summary


# What shows the progress of a replay: given the file's line count, a context in which
# each line number read is reported.
Track = Callable[[int], AbstractContextManager[Callable[[int], None]]]


def send_file(
    path: Path,
    settings: Settings,
    *,
    dry_run: bool,
    rate: float | None,
    wait: float | None,
    track: Track,
) -> tuple[ReplaySummary, int]:
    """`passk replay`: the broker checked (not for a dry run), the lines counted, then,
    inside `track`, the input topics checked and every valid line of `path` sent
    (`replay_file`); the summary and the file's line count."""
    from services.contract.exits import Unreachable
    from services.kafka.producer import TrafficProducer
    from services.kafka.reach import require_broker

    if not dry_run:
        require_broker(wait, settings)
    total = count_lines(path)
    with track(total) as on_line:
        if dry_run:
            return replay_file(path, sender=None, settings=settings, on_line=on_line), total
        # kafka errors escape to services.cli: one line, exit 4
        producer = TrafficProducer(settings)
        try:
            missing = producer.missing_topics([topic_name(t, settings) for t in REPLAYED_TOPICS])
            if missing:
                raise Unreachable(
                    f"missing topics: {', '.join(missing)}; nothing sent "
                    "(create them with `passk topics create`)"
                )
            # Bounded: waits for the broker's acknowledgements at most the producer's
            # deadline, and a SIGINT ends it with the summary.
            summary = replay_file(
                path, sender=producer, settings=settings, rate=rate, on_line=on_line
            )
        finally:
            producer.close(timeout_s=0)  # replay_file waited already
    return summary, total
