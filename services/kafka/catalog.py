"""The scenario catalog: every processor's view of the compacted scenarios topic.

Inside a Faust worker:

    catalog = ScenarioCatalog(settings)

    @app.task
    async def load_scenarios() -> None:
        await catalog.ready()          # caught up with the topic as it was at start

    scenario = catalog.get(event.scenario_id)                 # latest
    scenario = catalog.get(ref.scenario_id, ref.scenario_version)

The catalog reads with its own group-less consumer (no offsets committed, all
partitions assigned), so every worker sees every scenario whatever partitions its
Faust consumer group gave it. CLIs use the synchronous `load_catalog`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka.errors import KafkaError

from schemas.scenario import Scenario
from services.contract.codec import Rejection
from services.contract.scenario_records import CatalogState
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.follower import TopicFollower
from services.kafka.scan import ScanTimedOut, TopicMissing, batches

log = logging.getLogger(__name__)


# How long a processor waits for a scenario (version) its input names: one published moments
# before its traffic may not have been read yet.
SCENARIO_GRACE_S = 3.0


def unknown_scenario(scenario_id: str, version: str | None = None) -> Rejection:
    """Why an input naming a scenario (version) never published is a dead letter:
    `unknown_scenario` for an id alone, `unknown_scenario_version` when it names the
    version it was run (or graded) against."""
    if version is None:
        return Rejection(
            "unknown_scenario", f"scenario {scenario_id!r} is not published on the scenarios topic"
        )
    return Rejection(
        "unknown_scenario_version",
        f"scenario {scenario_id!r} version {version!r} is not published on the scenarios topic",
    )


class CatalogUnavailable(RuntimeError):
    """The scenarios topic cannot be read (missing topic, broker down past the deadline)."""


def _where(record: Any) -> str:
    return f"at {record.topic}[{record.partition}]@{record.offset} "


class ScenarioCatalog(TopicFollower):
    def __init__(self, settings: Settings) -> None:
        # `publish` writes a set in one transaction: an aborted set is never read.
        super().__init__(
            topic_name(Topic.SCENARIOS, settings),
            settings,
            label="scenario-catalog",
            isolation_level="read_committed",
        )
        self._state = CatalogState()
        self._changed = asyncio.Event()

    def on_record(self, record: Any) -> None:
        self._state.apply(record.key, record.value, where=_where(record))

    def on_batch(self) -> None:
        # Wake whoever waits for a scenario, then arm a fresh event for the next batch.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def ready(self, timeout: float = 60.0) -> None:
        """Start once; return when every record present at start has been read."""
        async with self._lock:
            if self.started:
                return
            try:
                await self._start(timeout)
            except (TimeoutError, OSError, KafkaError) as exc:
                raise CatalogUnavailable(
                    f"cannot read scenarios from {self.topic} ({type(exc).__name__}: {exc}); "
                    "does the topic exist (`passk topics create`) and does the broker answer?"
                ) from exc
            log.info("scenario catalog caught up: %d scenario(s)", len(self._state.latest()))

    # ---------------------------------------------------------------- queries

    @property
    def is_ready(self) -> bool:
        return self.started

    def get(self, scenario_id: str, version: str | None = None) -> Scenario | None:
        """The scenario (latest when version is None), or None if never seen."""
        return self._state.get(scenario_id, version)

    def latest(self) -> dict[str, Scenario]:
        return self._state.latest()

    async def published(
        self, scenario_id: str, version: str | None = None, *, timeout: float = SCENARIO_GRACE_S
    ) -> Scenario | None:
        """The scenario an input names: at once if read, else waited for (`wait_for`)."""
        return self.get(scenario_id, version) or await self.wait_for(
            scenario_id, version, timeout=timeout
        )

    async def wait_for(
        self, scenario_id: str, version: str | None = None, *, timeout: float
    ) -> Scenario | None:
        """Like `get`, but waits up to `timeout` s for a scenario published moments ago."""
        deadline = time.monotonic() + timeout
        while True:
            changed = self._changed
            found = self.get(scenario_id, version)
            remaining = deadline - time.monotonic()
            if found is not None or remaining <= 0:
                return found
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                return self.get(scenario_id, version)


# -------------------------------------------------------------- sync, for CLIs


def read_catalog(settings: Settings, *, timeout: float = 30.0) -> CatalogState:
    """Read the whole scenarios topic (up to its end at the time of the call; an aborted
    publish is never read: the scan reads committed records only)."""
    name = topic_name(Topic.SCENARIOS, settings)
    state = CatalogState()
    try:
        for batch in batches(settings, name, timeout=timeout):
            for record in batch:
                state.apply(record.key, record.value, where=_where(record))
    except TopicMissing:
        raise CatalogUnavailable(
            f"the scenarios topic {name} does not exist; run `passk topics create`"
        ) from None
    except ScanTimedOut as exc:
        raise CatalogUnavailable(str(exc)) from None
    return state


def load_catalog(settings: Settings) -> dict[str, Scenario]:
    """The latest version of every published scenario, by id."""
    return read_catalog(settings).latest()
