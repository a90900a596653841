"""`passk dead-letters [--since DURATION] [--reason R] [--json]`: every dead letter on the
dead-letters topic — inputs a processor refused, and traces the OTLP receiver or `passk
import otel` did not take (source `otlp`: no_matching_scenario, no_messages, idle,
too_many_spans, ...) — with its reason, source, key, time and a short excerpt, and the
counts per reason (DESIGN.md, "Production traffic").

The topic is read whole, up to its end at the start of the command, by a group-less
consumer (nothing committed). What is printed is bounded: the newest `--limit` letters
(default 1000) are listed, every letter read is counted.
"""

from __future__ import annotations

import base64
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

EXCERPT_CHARS = 200


@dataclass(frozen=True)
class Letter:
    reason: str
    source: str
    key: str | None
    at: datetime
    excerpt: str

    def as_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "source": self.source,
            "key": self.key,
            "at": self.at.isoformat().replace("+00:00", "Z"),
            "excerpt": self.excerpt,
        }


@dataclass
class Listing:
    letters: list[Letter] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    unreadable: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "dead_letters": [x.as_json() for x in self.letters],
            "counts": dict(sorted(self.counts.items())),
        }


def _text(b64: str | None, limit: int) -> str | None:
    if b64 is None:
        return None
    try:
        raw = base64.b64decode(b64)
    except ValueError:
        return None
    text = raw[: limit * 4].decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def letter_of(value: bytes) -> Letter | None:
    """A dead-letter record as listed; None when it is not one (never raises)."""
    from pydantic import ValidationError

    from schemas.events import DeadLetter

    try:
        d = DeadLetter.model_validate_json(value)
    except (ValidationError, ValueError):
        return None
    excerpt = _text(d.value_b64, EXCERPT_CHARS) or ""
    if d.detail:
        excerpt = f"{d.detail[:EXCERPT_CHARS]} | {excerpt}" if excerpt else d.detail[:EXCERPT_CHARS]
    return Letter(
        reason=d.reason,
        source=d.source_topic,
        key=_text(d.key_b64, 200),
        at=d.occurred_at,
        excerpt=excerpt[: 2 * EXCERPT_CHARS],
    )


def select(
    values: Iterable[bytes], *, since: datetime | None, reason: str | None, limit: int
) -> Listing:
    out = Listing()
    newest: deque[Letter] = deque(maxlen=limit)
    for value in values:
        letter = letter_of(value)
        if letter is None:
            out.unreadable += 1
            continue
        if since is not None and letter.at < since:
            continue
        if reason is not None and letter.reason != reason:
            continue
        out.counts[letter.reason] += 1
        newest.append(letter)
    out.letters = sorted(newest, key=lambda x: x.at)
    return out


def read_topic(settings: Any, *, timeout: float = 30.0) -> Iterable[bytes]:
    """Every record value on the dead-letters topic, up to its end offsets now."""
    from services.contract.exits import Unreachable
    from services.contract.topics import Topic, topic_name
    from services.kafka.scan import ScanTimedOut, TopicMissing, batches

    name = topic_name(Topic.DEAD_LETTERS, settings)
    try:
        for batch in batches(settings, name, timeout=timeout):
            for record in batch:
                yield record.value or b""
    except TopicMissing:
        raise Unreachable(
            f"the dead-letters topic {name} does not exist; run `passk topics create`"
        ) from None
    except ScanTimedOut as exc:
        raise Unreachable(str(exc)) from None


def list_dead_letters(
    settings: Any, *, since: str | None, reason: str | None, limit: int, wait: float | None
) -> Listing:
    """`passk dead-letters`: the letters on the topic now, the newest `limit` of those
    `since` ago (a duration: 90m, 2h, 1d) and of `reason`, every one counted."""
    from datetime import UTC, timedelta

    from services.contract.exits import UsageError
    from services.grading.windows import parse_duration
    from services.kafka.reach import require_broker

    cutoff = None
    if since is not None:
        try:
            cutoff = datetime.now(UTC) - timedelta(seconds=parse_duration(since))
        except ValueError as exc:
            raise UsageError(f"--since: {exc}") from None
    require_broker(wait, settings)
    return select(read_topic(settings), since=cutoff, reason=reason, limit=limit)
