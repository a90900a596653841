"""Small fakes of the ports a keyed join's steps use (the gate's and the verdict's): a record,
the join (only the methods the steps call), the dead letters, the scenario catalog. Every
send, delivery, dead letter and store goes to one `Log`, in order, so a test can say what
came before what."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from schemas.scenario import Scenario
from services.contract.codec import Rejection
from services.contract.settings import Settings
from services.kafka.catalog import unknown_scenario
from services.runtime.keyed_join import KeyedJoin
from tests.unit.fakes import RecordedDeadLetters


def record(
    topic: str,
    value: bytes | None,
    *,
    key: bytes | None = b"k",
    partition: int = 0,
    offset: int = 7,
    timestamp: float | None = None,
) -> Any:
    """A record as an agent sees it: `.value`, `.key` and `.message` (topic, partition,
    offset, key, value, the broker's timestamp in seconds; now by default)."""
    message = SimpleNamespace(
        topic=topic,
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        timestamp=time.time() if timestamp is None else timestamp,
    )
    return SimpleNamespace(value=value, key=key, message=message)


@dataclass
class Log:
    """("send", topic, key, value), ("deliver", topic, key, value), ("reject", event,
    rejection), ("store", key, state): what the steps did, in order."""

    entries: list[tuple[Any, ...]] = field(default_factory=list)

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [e[1:] for e in self.entries if e[0] == kind]

    def kinds(self) -> list[str]:
        return [e[0] for e in self.entries]

    def reasons(self) -> list[str]:
        return [rejection.reason for _, rejection in self.of("reject")]


class FakeDeadLetters(RecordedDeadLetters):
    """The real dead letters' decoding and guard, each dead letter logged instead of sent."""

    topic = "dead-letters"

    def __init__(self, log: Log, processor: str, settings: Settings) -> None:
        super().__init__(processor, settings)
        self.log = log

    async def __call__(self, event: Any, rejection: Rejection) -> None:
        await super().__call__(event, rejection)
        self.log.entries.append(("reject", event, rejection))


class FakeDelivery:
    def __init__(self, log: Log) -> None:
        self.log = log

    async def __call__(self, topic: Any, key: bytes | None, value: bytes) -> None:
        self.log.entries.append(("deliver", topic, key, value))


class FakeCatalog:
    """Scenarios by (id, version); the latest of an id under (id, None)."""

    is_ready = True

    def __init__(self, *scenarios: Scenario) -> None:
        self.by: dict[tuple[str, str | None], Scenario] = {}
        for scenario in scenarios:
            self.by[(scenario.id, scenario.version)] = scenario
            self.by[(scenario.id, None)] = scenario

    def get(self, scenario_id: str, version: str | None = None) -> Scenario | None:
        return self.by.get((scenario_id, version))

    def latest(self) -> dict[str, Scenario]:
        return {sid: sc for (sid, version), sc in self.by.items() if version is None}

    async def published(
        self, scenario_id: str, version: str | None = None, *, timeout: float = 0.0
    ) -> Scenario | None:
        return self.get(scenario_id, version)


class FakeJoin:
    """The KeyedJoin methods the steps call, over a dict of states; decoding is the real
    one, KeyedJoin's own through the real DeadLetters.decoded (what is refused, and why,
    is the steps' contract)."""

    def __init__(self, log: Log, catalog: FakeCatalog, reject: FakeDeadLetters) -> None:
        self.log, self.catalog, self.reject = log, catalog, reject
        self.settings = reject.settings
        self.spec = SimpleNamespace(name=reject.processor)
        self.states: dict[str, Any] = {}

    def load(self, key: str) -> Any:
        return self.states.get(key)

    def store(self, key: str, state: Any) -> None:
        self.log.entries.append(("store", key, state))
        self.states[key] = state

    async def send(self, topic: Any, key: str, value: bytes) -> None:
        self.log.entries.append(("send", topic, key, value))

    decoded = KeyedJoin.decoded

    async def scenario(
        self, event: Any, scenario_id: str, version: str | None = None
    ) -> Scenario | None:
        found = self.catalog.get(scenario_id, version)
        if found is None:
            await self.reject(event, unknown_scenario(scenario_id, version))
        return found
