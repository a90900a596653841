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
import json
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import typer

from services.contract.exits import BROKER_WAIT

EXCERPT_CHARS = 200


@dataclass(frozen=True)
class Letter:
    reason: str
    source: str
    key: str | None
    at: datetime
    excerpt: str

    def as_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "source": self.source, "key": self.key,
                "at": self.at.isoformat().replace("+00:00", "Z"), "excerpt": self.excerpt}


@dataclass
class Listing:
    letters: list[Letter] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    unreadable: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"dead_letters": [x.as_json() for x in self.letters],
                "counts": dict(sorted(self.counts.items()))}


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
        excerpt = f"{d.detail[:EXCERPT_CHARS]} | {excerpt}" if excerpt else d.detail[
            :EXCERPT_CHARS]
    return Letter(reason=d.reason, source=d.source_topic, key=_text(d.key_b64, 200),
                  at=d.occurred_at, excerpt=excerpt[: 2 * EXCERPT_CHARS])


def select(values: Iterable[bytes], *, since: datetime | None, reason: str | None,
           limit: int) -> Listing:
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
        raise Unreachable(f"the dead-letters topic {name} does not exist; run "
                          "`passk topics create`") from None
    except ScanTimedOut as exc:
        raise Unreachable(str(exc)) from None


def register(app: typer.Typer) -> None:
    @app.command("dead-letters")
    def dead_letters(
        since: str = typer.Option(None, "--since", help="only letters this recent "
                                  "(a duration: 90m, 2h, 1d)"),
        reason: str = typer.Option(None, "--reason", help="only letters of this reason, "
                                   "e.g. no_matching_scenario"),
        limit: int = typer.Option(1000, "--limit", min=1, help="list at most the newest N "
                                  "(every letter is counted)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Every dead letter, and every trace the OTLP receiver or `passk import otel` did
        not take, with its reason, source, key and an excerpt; counts per reason. Exit 4
        when the broker is down."""
        from datetime import UTC, timedelta

        from rich.table import Table

        from services.contract.exits import UsageError, console
        from services.contract.settings import get_settings
        from services.grading.windows import parse_duration
        from services.kafka.reach import require_broker

        cutoff = None
        if since is not None:
            try:
                cutoff = datetime.now(UTC) - timedelta(seconds=parse_duration(since))
            except ValueError as exc:
                raise UsageError(f"--since: {exc}") from None
        settings = get_settings()
        require_broker(wait, settings)
        listing = select(read_topic(settings), since=cutoff, reason=reason, limit=limit)
        if as_json:
            typer.echo(json.dumps(listing.as_json(), ensure_ascii=False))
            return
        out = console()
        table = Table(title=f"dead letters ({sum(listing.counts.values())})")
        for column in ("at (UTC)", "reason", "source", "key", "excerpt"):
            table.add_column(column, overflow="fold")
        for x in listing.letters:
            table.add_row(x.at.strftime("%Y-%m-%d %H:%M:%S"), x.reason, x.source, x.key or "",
                          x.excerpt)
        out.print(table)
        for r, n in sorted(listing.counts.items()):
            out.print(f"{r}: {n}", markup=False, highlight=False)
