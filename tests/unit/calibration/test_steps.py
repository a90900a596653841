"""The calibration's steps with fake ports: what is sent, refused, stored and counted, and in
which order (an output delivered before the table records it)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy.exc import OperationalError

from schemas.events import JudgeCalibration, Label, LabelledVerdict
from services.calibration import steps as steps_module
from services.calibration.metrics import CalibrationMetrics
from services.calibration.steps import Steps
from services.contract.codec import encode
from services.grading.calibration import Bar, Matrix, calibration_event
from services.runtime.metrics import CommonMetrics
from tests.unit.factories import judge_verdict
from tests.unit.fakes import RecordedDeadLetters, default_settings

SETTINGS = default_settings(PASSK_TOPIC_PREFIX="t.")
LABELS = "t.labels.v1"
VERDICTS = "t.judge-verdicts.v1"
CALIBRATIONS = "t.judge-calibrations.v1"
LABELLED = "t.labelled-verdicts.v1"


def record(topic: str, value: bytes, key: bytes = b"k", offset: int = 7) -> Any:
    return SimpleNamespace(
        value=value,
        message=SimpleNamespace(
            topic=topic, partition=0, offset=offset, key=key, timestamp=0.0, value=value
        ),
    )


class Table(dict[str, Any]):
    """A table that notes each write in the shared log."""

    def __init__(self, name: str, log: list[tuple[Any, ...]]) -> None:
        super().__init__()
        self.name, self.log = name, log

    def __setitem__(self, key: str, value: Any) -> None:
        self.log.append(("stored", self.name, key))
        super().__setitem__(key, value)


class Store:
    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log
        self.calibrations: list[JudgeCalibration] = []
        self.items: list[Any] = []

    def record_calibration(self, c: JudgeCalibration) -> None:
        self.calibrations.append(c)
        self.log.append(("store", "calibration", c.event_id))

    def put_item(self, row: Any) -> None:
        self.items.append(row)
        self.log.append(("store", "item", row.item_id))

    def create_schema(self) -> None:
        raise OperationalError("CREATE", {}, Exception("refused"))


class Harness:
    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.sent: list[tuple[str, bytes, dict[str, Any]]] = []
        self.letters = RecordedDeadLetters("calibration", SETTINGS)
        self.rejected = self.letters.sent
        self.joins = Table("joins", self.log)
        self.matrices = Table("matrices", self.log)
        self.store = Store(self.log)
        self.registry = CollectorRegistry()
        self.steps = Steps(
            settings=SETTINGS,
            processor="calibration",
            joins=self.joins,
            matrices=self.matrices,
            send_labelled=self.sender(LABELLED),
            send_calibration=self.sender(CALIBRATIONS),
            reject=self.letters,
            store=self.store,  # type: ignore[arg-type]
            metrics=CalibrationMetrics(self.registry),
            events=CommonMetrics(self.registry).events,
        )

    def sender(self, topic: str):  # type: ignore[no-untyped-def]
        async def send(key: bytes, value: bytes) -> Any:
            self.sent.append((topic, key, json.loads(value)))

            async def delivered() -> None:
                self.log.append(("delivered", topic, key))

            return delivered()

        return send

    def count(self, note: str) -> float:
        return (
            self.registry.get_sample_value(
                "passk_events_total", {"processor": "calibration", "note": note}
            )
            or 0.0
        )


def label(trial: str = "t1", passed: bool = True, event_id: str = "l1") -> bytes:
    return encode(Label(event_id=event_id, trial_id=trial, judge_id="j", passed=passed))


def verdict(trial: str = "t1", result: str = "failed") -> bytes:
    v = judge_verdict("j", result, trial=trial).model_copy(update={"judge_version": "v1"})
    return encode(v)


def set_calibration(cells: tuple[int, int, int, int]) -> bytes:
    m = Matrix(tp=cells[0], fp=cells[1], fn=cells[2], tn=cells[3])
    return encode(
        calibration_event(
            judge_id="j",
            version="v1",
            matrix=m,
            bar=Bar(),
            source="set",
            assertion="a",
            prompt_hash="p",
            model="m",
            dimension=None,
            event_id="set-1",
        )
    )


def labelled(trial: str = "t1", result: str = "failed", human: str = "pass") -> bytes:
    return encode(
        LabelledVerdict(
            event_id=f"labelled:{trial}:j:l1",
            trial_id=trial,
            run_id="run-1",
            scenario_id="s",
            judge_id="j",
            judge_version="v1",
            judge_result=result,
            judge_reason="r",
            label=human,
            note="why",
            label_event_id="l1",
        )
    )


# ------------------------------------------------------------------------- join


async def test_a_label_without_its_verdict_waits_and_sends_nothing() -> None:
    h = Harness()
    await h.steps.join(record(LABELS, label()))
    assert h.sent == []
    assert "t1" in h.joins and h.joins["t1"]["sent"] == {}
    assert h.count("waiting") == 1 and h.count("joined") == 0


async def test_a_label_meeting_its_verdict_is_sent_by_judge_before_the_join_is_recorded() -> None:
    h = Harness()
    await h.steps.join(record(LABELS, label()))
    h.log.clear()
    await h.steps.join(record(VERDICTS, verdict()))
    ((topic, key, value),) = h.sent
    assert (topic, key) == (LABELLED, b"j")
    assert (value["trial_id"], value["judge_result"], value["label"]) == ("t1", "failed", "pass")
    assert h.log == [("delivered", LABELLED, b"j"), ("stored", "joins", "t1")]
    assert h.joins["t1"]["sent"] == {"j": "l1"}
    assert h.count("joined") == 1


async def test_a_redelivered_verdict_sends_nothing_again() -> None:
    h = Harness()
    await h.steps.join(record(LABELS, label()))
    await h.steps.join(record(VERDICTS, verdict()))
    await h.steps.join(record(VERDICTS, verdict()))
    assert len(h.sent) == 1
    assert h.count("waiting") == 2 and h.count("joined") == 1


async def test_a_changed_label_is_sent_again() -> None:
    h = Harness()
    await h.steps.join(record(VERDICTS, verdict()))
    await h.steps.join(record(LABELS, label(passed=True, event_id="l1")))
    await h.steps.join(record(LABELS, label(passed=False, event_id="l2")))
    assert [value["label"] for _, _, value in h.sent] == ["pass", "fail"]


async def test_an_unreadable_label_is_dead_lettered_and_nothing_else_happens() -> None:
    h = Harness()
    bad = record(LABELS, b"{not json")
    await h.steps.join(bad)
    ((event, rejection),) = h.rejected
    assert event is bad and rejection.reason == "invalid_json"
    assert h.sent == [] and h.log == [] and h.count("waiting") == 0


async def test_a_verdict_on_the_labels_topic_is_refused_as_no_label() -> None:
    h = Harness()
    await h.steps.join(record(LABELS, verdict()))
    ((_, rejection),) = h.rejected
    assert rejection.reason != "invalid_json"  # it is JSON, only not a label
    assert h.sent == [] and h.joins == {}


# ------------------------------------------------------------------------- fold


async def test_a_set_calibration_is_stored_and_shown_and_sends_nothing() -> None:
    h = Harness()
    await h.steps.fold(record(CALIBRATIONS, set_calibration((5, 0, 0, 5))))
    assert [c.event_id for c in h.store.calibrations] == ["set-1"]
    assert h.registry.get_sample_value("passk_judge_labelled", {"judge": "j"}) == 10
    assert h.sent == []
    assert h.log == [("store", "calibration", "set-1"), ("stored", "matrices", "j")]
    assert h.count("recalibrated") == 0


async def test_a_labelled_verdict_is_kept_then_recalibrates_before_the_matrix_is_recorded() -> None:
    h = Harness()
    await h.steps.fold(record(CALIBRATIONS, set_calibration((5, 0, 0, 5))))
    h.log.clear()
    await h.steps.fold(record(LABELLED, labelled(result="failed", human="pass")))
    (item,) = h.store.items
    assert (item.item_id, item.trial_id, item.label, item.note) == ("trial:t1", "t1", "pass", "why")
    ((topic, key, running),) = h.sent
    assert (topic, key) == (CALIBRATIONS, b"j")
    assert (running["fp"], running["n"], running["source"]) == (1, 11, "labels")
    assert h.log == [
        ("store", "item", "trial:t1"),
        ("delivered", CALIBRATIONS, b"j"),
        ("stored", "matrices", "j"),
    ]
    assert h.count("recalibrated") == 1


async def test_the_same_labelled_verdict_twice_recalibrates_once() -> None:
    h = Harness()
    await h.steps.fold(record(CALIBRATIONS, set_calibration((5, 0, 0, 5))))
    await h.steps.fold(record(LABELLED, labelled()))
    await h.steps.fold(record(LABELLED, labelled()))
    assert len(h.sent) == 1 and h.count("recalibrated") == 1


async def test_an_unreadable_labelled_verdict_is_dead_lettered_and_nothing_stored() -> None:
    h = Harness()
    await h.steps.fold(record(LABELLED, b""))
    ((_, rejection),) = h.rejected
    assert rejection.reason == "empty"
    assert h.log == [] and h.store.items == []


# ------------------------------------------------------------------------- store


async def test_a_store_that_is_down_is_waited_for_with_growing_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(steps_module.asyncio, "sleep", no_wait)
    failures = iter([True, True, True, False])
    written: list[str] = []

    def write(row: str) -> None:
        if next(failures):
            raise OperationalError("INSERT", {}, Exception("down"))
        written.append(row)

    await steps_module.stored(write, "row")
    assert written == ["row"] and waits == [0.5, 1.0, 2.0]


async def test_tables_not_created_at_start_are_left_to_the_first_write(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    with caplog.at_level(logging.WARNING):
        await h.steps.start()  # does not raise
    assert "could not create its tables yet" in caplog.text
