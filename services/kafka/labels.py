"""Human labels on `labels.v1`: how one is made and published (`passk label` and the
review app publish them the same way), and a follower that keeps every label read.

A label's event id is derived from what it says and who said it, so the same person
sending the same label twice sends one event, and two reviewers agreeing are two facts.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from schemas.events import Label
from services.contract.codec import Rejection, decode, encode
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.follower import TopicFollower
from services.kafka.send import send_all

log = logging.getLogger(__name__)


def label_event(
    trial_id: str, judge_id: str, passed: bool, note: str | None, labeller: str | None
) -> Label:
    """The Label event for one human judgement of one judge on one trial."""
    ident = hashlib.sha256(f"{trial_id}\x1f{judge_id}\x1f{passed}\x1f{note}\x1f{labeller}".encode())
    return Label(
        event_id=f"label:{ident.hexdigest()[:24]}",
        trial_id=trial_id,
        judge_id=judge_id,
        passed=passed,
        note=note,
        labeller=labeller,
    )


def publish_labels(settings: Settings, labels: list[Label]) -> None:
    """Publish the labels (key: trial id) and wait until the broker has every one; raises
    what the producer raised when it could not."""
    send_all(settings, Topic.LABELS, [(label.trial_id, encode(label)) for label in labels])


class LabelFollower(TopicFollower):
    """Every label on the topic, in log order (per partition), kept as read."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(topic_name(Topic.LABELS, settings), settings, label="labels")
        self.labels: list[Label] = []

    def on_record(self, record: Any) -> None:
        label = decode(record.value, Label)
        if isinstance(label, Rejection):
            log.warning("labels: skipping %s@%d: %s", record.topic, record.offset, label.detail)
            return
        self.labels.append(label)

    async def ready(self, timeout: float = 60.0) -> None:
        async with self._lock:
            if not self.started:
                await self._start(timeout)

    async def sync(self, timeout: float = 10.0) -> None:
        """Read up to the topic's end as it is now (a page shows every label sent before
        it was asked for)."""
        import asyncio

        async with self._lock, asyncio.timeout(timeout):
            await self._catch_up()
