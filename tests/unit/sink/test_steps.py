"""The sink's handling of a batch, with the store and the dead letters faked: what is
written in one transaction, what is refused (and why), what is written one by one."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy.exc import IntegrityError, OperationalError

from services.contract.codec import encode
from services.contract.topics import Topic, topic_name
from services.runtime.metrics import CommonMetrics
from services.runtime.outage import STORE, Dependency, OutageMetrics
from services.sink.steps import Steps
from tests.unit.fakes import RecordedDeadLetters, default_settings
from tests.unit.storage.factories import conversation, gate, judge, verdict

SETTINGS = default_settings()


def record(topic: Topic, value: bytes | None, offset: int = 0) -> Any:
    return SimpleNamespace(
        value=value,
        message=SimpleNamespace(
            topic=topic_name(topic, SETTINGS),
            partition=0,
            offset=offset,
            key=b"t1",
            value=value,
            timestamp=None,
        ),
    )


class FakeStore:
    """Each call's events, by event id; a batch holding a `refused` id fails like a row the
    database refuses; `down` calls fail like a database that is not there."""

    def __init__(
        self,
        refused: set[str] = frozenset(),
        down: int = 0,  # type: ignore[assignment]
        error: Exception | None = None,
    ) -> None:
        self.refused, self.down, self.error = refused, down, error
        self.calls: list[list[str]] = []
        self.schema_created = False

    def apply_many(self, events: list[Any]) -> int:
        if self.down:
            self.down -= 1
            raise OperationalError("insert", {}, Exception("database is locked"))
        if self.error is not None:
            raise self.error
        ids = [e.event_id for e in events]
        if self.refused & set(ids):
            raise IntegrityError("insert", {}, Exception(f"refused {sorted(self.refused)}"))
        self.calls.append(ids)
        return len(ids)

    def create_schema(self) -> None:
        if self.down:
            raise OperationalError("create", {}, Exception("connection refused"))
        self.schema_created = True


class Sink:
    def __init__(self, store: FakeStore | None = None) -> None:
        self.store = store or FakeStore()
        self.letters = RecordedDeadLetters("sink")
        self.common = CommonMetrics(CollectorRegistry())
        database = Dependency(
            STORE, "test", first_backoff_s=0.001, metrics=OutageMetrics(CollectorRegistry())
        )
        self.steps = Steps(
            SETTINGS,
            store=self.store,
            database=database,  # type: ignore[arg-type]
            reject=self.letters,
            processor="sink",
            common=self.common,
        )

    def stored(self) -> float:
        return self.common.events.labels("sink", "stored")._value.get()

    def reasons(self) -> list[tuple[int, str]]:
        return [(event.message.offset, r.reason) for event, r in self.letters.sent]


GOOD = [
    record(Topic.CONVERSATION_FINISHED, encode(conversation("t1")), 0),
    record(Topic.GATE_RESULTS, encode(gate("t1", "state", True)), 1),
    record(Topic.JUDGE_VERDICTS, encode(judge("t1", "polite", "passed")), 2),
    record(Topic.TRIAL_VERDICTS, encode(verdict("t1", "passed")), 3),
]
IDS = ["cf:t1", "gate:t1:state:v1", "judge:t1:polite:v1", "verdict:t1"]


async def test_a_batch_is_written_in_one_transaction_and_counted_stored() -> None:
    sink = Sink()
    await sink.steps.sink_batch(GOOD)
    assert [len(call) for call in sink.store.calls] == [4]
    assert sink.letters.sent == []
    assert sink.stored() == 4


async def test_each_topic_is_decoded_as_the_model_it_holds() -> None:
    sink = Sink()
    # A gate result read from the trial-verdicts topic is not a trial verdict.
    wrong = record(Topic.TRIAL_VERDICTS, GOOD[1].value, 9)
    await sink.steps.sink_batch([wrong])
    assert [offset for offset, _ in sink.reasons()] == [9]
    assert sink.store.calls == []


async def test_an_unusable_record_is_a_dead_letter_and_the_rest_are_written() -> None:
    sink = Sink()
    bad = record(Topic.GATE_RESULTS, b"{not json", 7)
    await sink.steps.sink_batch([GOOD[0], bad, GOOD[1]])
    assert sink.reasons() == [(7, "invalid_json")]
    assert len(sink.store.calls) == 1 and len(sink.store.calls[0]) == 2
    assert sink.stored() == 2


async def test_a_trial_verdict_with_k_below_one_is_refused_as_an_invalid_field() -> None:
    sink = Sink()
    k0 = encode(verdict("t2", "passed", k=0))
    await sink.steps.sink_batch([record(Topic.TRIAL_VERDICTS, k0, 5)])
    assert sink.reasons() == [(5, "invalid_field")]
    assert "k must be at least 1 (got 0)" in sink.letters.sent[0][1].detail
    assert sink.store.calls == [] and sink.stored() == 0


async def test_a_record_the_database_refuses_is_found_one_by_one_and_alone_dead_lettered() -> None:
    sink = Sink(FakeStore(refused={"gate:t1:state:v1"}))
    await sink.steps.sink_batch(GOOD)
    assert sink.reasons() == [(1, "unwritable")]
    assert "refused" in sink.letters.sent[0][1].detail
    assert sink.store.calls == [["cf:t1"], ["judge:t1:polite:v1"], ["verdict:t1"]]
    assert sink.stored() == 3


async def test_an_error_no_check_foresaw_in_the_batch_write_is_also_found_one_by_one() -> None:
    sink = Sink(FakeStore(error=ValueError("surprise")))
    await sink.steps.sink_batch(GOOD[:2])
    # Each record alone raises it too: each is a processing error, nothing is stored.
    assert sink.reasons() == [(0, "processing_error"), (1, "processing_error")]
    assert sink.stored() == 0


async def test_a_database_that_is_down_is_waited_for_and_nothing_is_dead_lettered() -> None:
    sink = Sink(FakeStore(down=2))
    await sink.steps.sink_batch(GOOD)
    assert sink.store.calls == [IDS]
    assert sink.letters.sent == []
    assert sink.stored() == 4


async def test_an_outage_of_the_infrastructure_propagates_and_stores_nothing() -> None:
    sink = Sink(FakeStore(error=ConnectionResetError("broker gone")))
    with pytest.raises(ConnectionResetError):
        await sink.steps.sink_batch(GOOD)
    assert sink.letters.sent == [] and sink.stored() == 0


async def test_a_batch_of_only_unusable_records_writes_nothing() -> None:
    sink = Sink()
    await sink.steps.sink_batch([record(Topic.JUDGE_VERDICTS, None, 3)])
    assert sink.reasons() == [(3, "empty")]
    assert sink.store.calls == []


async def test_the_tables_are_created_at_start() -> None:
    sink = Sink()
    await sink.steps.create_tables()
    assert sink.store.schema_created


async def test_a_database_down_at_start_is_logged_and_left_to_the_first_write(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = Sink(FakeStore(down=1))
    with caplog.at_level(logging.WARNING):
        await sink.steps.create_tables()
    assert not sink.store.schema_created
    assert "could not create the projection's tables yet" in caplog.text
