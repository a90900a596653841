"""Agents declared from the registry, and the three ways they read. (The agents of every real
app are checked against the registry in tests/integration/test_apps_match_registry.py;
they read the real broker in tests/integration and tests/e2e.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mode.utils.objects import qualname

from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.runtime.agents import each_record, in_batches, subscribe, through_outbox
from services.runtime.app import make_app
from tests.unit.fakes import RecordedDeadLetters


def record(offset: int) -> Any:
    return SimpleNamespace(
        value=b"v", message=SimpleNamespace(topic="t", partition=0, offset=offset)
    )


class Stream:
    """What an agent reads: records one by one (`events`) or in batches (`take_events`)."""

    def __init__(self, records: list[Any], log: list[str]) -> None:
        self.records = records
        self.log = log
        self.taken: tuple[int, float] | None = None

    async def events(self) -> AsyncIterator[Any]:
        for r in self.records:
            self.log.append(f"read {r.message.offset}")
            yield r

    async def take_events(self, n: int, within: float) -> AsyncIterator[list[Any]]:
        self.taken = (n, within)
        for i in range(0, len(self.records), n):
            yield self.records[i : i + n]


def settings_in(tmp_path: Path) -> Settings:
    return Settings(
        PASSK_TOPIC_PREFIX="agents-test.", PASSK_DATA_DIR=str(tmp_path), PASSK_METRICS_PORT=0
    )  # type: ignore[call-arg]


async def nothing(stream: Any) -> None:
    return None


def test_each_agent_reads_the_registrys_topics_under_its_registry_name(tmp_path: Path) -> None:
    settings = settings_in(tmp_path)
    spec = PROCESSORS["judge"]
    app = make_app(spec.name, settings)
    subscribe(
        app, spec, settings, dict.fromkeys(spec.agents, nothing), concurrency={"regrade_trials": 3}
    )
    agents = {name.rsplit(".", 1)[-1]: agent for name, agent in app.agents.items()}
    assert set(agents) == {"judge_trials", "judge_after_gates", "regrade_trials"}
    assert sorted(agents["judge_trials"].channel.topics) == [
        topic_name(Topic.CONVERSATION_FINISHED, settings)
    ]
    assert sorted(agents["regrade_trials"].channel.topics) == [
        topic_name(Topic.REGRADE_REQUESTS, settings)
    ]
    assert agents["regrade_trials"].concurrency == 3
    assert agents["judge_trials"].concurrency == 1
    assert all(name.startswith("services.judge.app.") for name in app.agents)


@pytest.mark.parametrize(
    "given",
    [
        {"judge_trials": nothing},  # two of the registry's agents missing
        {
            "judge_trials": nothing,
            "judge_after_gates": nothing,
            "regrade_trials": nothing,
            "extra": nothing,
        },  # one the registry does not know
    ],
)
def test_agents_other_than_the_registrys_are_refused(tmp_path: Path, given: dict[str, Any]) -> None:
    settings = settings_in(tmp_path)
    app = make_app("judge", settings)
    with pytest.raises(ValueError, match="do not match the registry"):
        subscribe(app, PROCESSORS["judge"], settings, given)
    assert not app.agents  # nothing half-declared


def test_each_record_waits_for_before_then_guards_every_record() -> None:
    log: list[str] = []
    letters = RecordedDeadLetters()

    async def before() -> None:
        log.append("ready")

    async def handle(r: Any) -> None:
        if r.message.offset == 2:
            raise KeyError("no such field")
        log.append(f"handled {r.message.offset}")

    run = each_record(letters, handle, before=before)
    asyncio.run(run(Stream([record(1), record(2), record(3)], log)))  # type: ignore[arg-type]
    assert log == ["ready", "read 1", "handled 1", "read 2", "read 3", "handled 3"]
    assert [(r.message.offset, why.reason) for r, why in letters.sent] == [(2, "processing_error")]


def test_in_batches_hands_each_batch_whole_at_the_configured_size() -> None:
    batches: list[list[int]] = []

    async def handle_batch(records: Sequence[Any]) -> None:
        batches.append([r.message.offset for r in records])

    stream = Stream([record(i) for i in range(5)], [])
    asyncio.run(in_batches(handle_batch, batch_max=2, within_s=0.25)(stream))  # type: ignore[arg-type]
    assert batches == [[0, 1], [2, 3], [4]]
    assert stream.taken == (2, 0.25)


def test_through_outbox_runs_the_outbox_loop_with_the_guard_and_its_batching() -> None:
    log: list[str] = []
    letters = RecordedDeadLetters()

    class Outbox:
        async def run(self, stream: Any, handle: Any, **batching: Any) -> None:
            log.append(f"run {sorted(batching.items())}")
            for r in stream.records:
                await handle(r)

    async def handle(r: Any) -> None:
        raise ValueError("bad")

    async def before() -> None:
        log.append("ready")

    run = through_outbox(
        Outbox(),
        letters,
        handle,
        batch_max=50,  # type: ignore[arg-type]
        within_s=0.1,
        concurrently=True,
        before=before,
    )
    asyncio.run(run(Stream([record(9)], log)))  # type: ignore[arg-type]
    assert log == ["ready", "run [('batch_max', 50), ('concurrently', True), ('within_s', 0.1)]"]
    assert letters.reasons() == ["processing_error"]  # the guard wraps the handler


def test_each_agent_is_labelled_by_its_registry_name_in_fausts_logs(tmp_path: Path) -> None:
    settings = settings_in(tmp_path)
    spec = PROCESSORS["judge"]
    app = make_app(spec.name, settings)
    subscribe(
        app,
        spec,
        settings,
        {
            "judge_trials": each_record(RecordedDeadLetters(), nothing),
            "judge_after_gates": nothing,
            "regrade_trials": nothing,
        },
    )
    # what Faust's labels (Agent.label, shortlabel) print, shortened when long
    assert {name: qualname(agent.fun) for name, agent in app.agents.items()} == {
        name: name
        for name in (
            "services.judge.app.judge_trials",
            "services.judge.app.judge_after_gates",
            "services.judge.app.regrade_trials",
        )
    }
    assert "regrade_trials" in app.agents["services.judge.app.regrade_trials"].shortlabel


def test_concurrency_for_an_agent_it_has_not_is_refused(tmp_path: Path) -> None:
    settings = settings_in(tmp_path)
    app = make_app("judge", settings)
    with pytest.raises(ValueError, match=r"concurrency for agents it has not: \['regrade'\]"):
        subscribe(
            app,
            PROCESSORS["judge"],
            settings,
            dict.fromkeys(PROCESSORS["judge"].agents, nothing),
            concurrency={"regrade": 3},
        )
    assert not app.agents
