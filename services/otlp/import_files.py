"""`passk import otel`'s work: OTLP files mapped to trials (`importer.plan_import`), their
sessions read by a state probe if one is given, and the trials and the dead letters of
the traces not taken published; what it did, as a value (`Imported`)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kafka.errors import KafkaError

from schemas.scenario import Scenario
from services.contract.exits import Unreachable
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.otlp.importer import ImportPlan, Probe, Published, plan_import, publish_plan

SENT_TOPICS = (Topic.CONVERSATION_FINISHED, Topic.SESSION_PERSISTED, Topic.DEAD_LETTERS)


class ImportProgress(Protocol):
    """What shows the progress of an import (services.otlp.render.import_progress)."""

    def mapping(self, done: int, total: int) -> None: ...

    def stage(self, description: str, total: int) -> Callable[[], None]:
        """A new bar; what to call as each of its `total` steps is done."""
        ...


@dataclass(frozen=True)
class Imported:
    plan: ImportPlan
    published: Published | None  # None: a dry run, or nothing to send
    dry_run: bool
    probed: bool  # a state probe was asked

    @property
    def acknowledged(self) -> int:
        return self.published.acknowledged if self.published is not None else 0

    @property
    def undelivered(self) -> list[str]:
        return self.published.undelivered if self.published is not None else []

    @property
    def interrupted(self) -> bool:
        return self.published is not None and self.published.interrupted

    @property
    def exit_code(self) -> int:
        """130 stopped, 4 a trial not delivered, 3 no trace taken, else 0."""
        if self.interrupted:
            return 130
        if self.undelivered:
            return 4
        return 0 if self.plan.taken else 3


def import_files(
    files: Sequence[Path],
    settings: Settings,
    *,
    dry_run: bool,
    wait: float | None,
    open_probe: Callable[[], Probe] | None,
    progress: Callable[[], AbstractContextManager[ImportProgress]],
    warn: Callable[[str], None],
) -> Imported:
    """Every trace of `files` mapped (with the published scenarios' match rules), the
    sessions of those without one read by `open_probe`'s probe, then (not a dry run) the
    dead letters and the trials sent, every send accounted for. The broker is checked
    first, then all of it happens inside `progress()`."""
    from services.kafka.reach import require_broker

    if not dry_run:
        require_broker(wait, settings)
    published = None
    with progress() as shown:
        plan = plan_import(files, shown.mapping, scenarios=_rules(settings, dry_run, warn))
        if open_probe is not None:
            _probe(plan, open_probe, shown)
        if not dry_run and (plan.taken or plan.letters):
            published = _publish(plan, settings, shown)
    return Imported(plan, published, dry_run, open_probe is not None)


def _rules(settings: Settings, dry_run: bool, warn: Callable[[str], None]) -> list[Scenario] | None:
    """The published scenarios, whose match rules take traces with no passk ids. A dry
    run without a readable catalog maps without them (and says so)."""
    from services.kafka.catalog import CatalogUnavailable, load_catalog

    try:
        return list(load_catalog(settings).values())
    except (CatalogUnavailable, OSError, KafkaError) as exc:
        if not dry_run:
            raise Unreachable(f"cannot read the published scenarios: {exc}") from None
        warn(
            f"warning: no scenario catalog ({exc}); traces without passk ids are "
            "mapped without match rules"
        )
        return None


def _probe(plan: ImportPlan, open_probe: Callable[[], Probe], progress: ImportProgress) -> None:
    import asyncio

    from services.otlp.importer import probe_sessions

    asked = progress.stage("state probe", sum(1 for t in plan.taken if t.session is None))

    async def ask() -> None:
        reader = open_probe()
        try:
            await probe_sessions(plan, reader, on_trial=asked)
        finally:
            await reader.close()

    asyncio.run(ask())


def _publish(plan: ImportPlan, settings: Settings, progress: ImportProgress) -> Published:
    from services.contract.codec import encode
    from services.kafka.producer import TrafficProducer

    events = [e for t in plan.taken for e in (t.conversation, t.session) if e is not None]
    sent = progress.stage("publishing", len(events) + len(plan.letters))
    letters_topic = topic_name(Topic.DEAD_LETTERS, settings)
    producer = TrafficProducer(settings)
    try:
        missing = producer.missing_topics([topic_name(t, settings) for t in SENT_TOPICS])
        if missing:
            raise Unreachable(
                f"missing topics: {', '.join(missing)}; nothing "
                "sent (create them with `passk topics create`)"
            )
        # Nothing dropped in silence: each trace not taken is a dead letter (sent first;
        # publish_plan waits for every send, these too).
        for letter in plan.letters:
            key = base64.b64decode(letter.key_b64) if letter.key_b64 else None
            producer.send_raw(letters_topic, key, encode(letter), ref=letter.event_id)
            sent()
        # Bounded by the producer's deadline; SIGINT ends it with the summary.
        return publish_plan(plan, producer, on_event=sent)
    finally:
        producer.close(timeout_s=0)  # publish_plan waited already
