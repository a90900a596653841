"""The verdict's steps over fakes of its ports (tests/unit/join_fakes.py): when a trial's
verdict is published (once, before its state is stored), what is dead-lettered and why,
what a tick does, what is counted. (Against the broker: tests/integration/
test_gate_verdict.py, test_trial_identity.py.)"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from schemas.scenario import Scenario
from services.contract.codec import encode
from services.grading.calibration import CalibrationBook
from services.runtime.metrics import CommonMetrics
from services.verdict import domain
from services.verdict.metrics import VerdictMetrics
from services.verdict.steps import Steps
from tests.unit.factories import gate_result, judge_verdict, scenario
from tests.unit.fakes import default_settings
from tests.unit.join_fakes import FakeCatalog, FakeDeadLetters, FakeJoin, Log, record

GATES, JUDGES = "p.gate-results", "p.judge-verdicts"
TIMING = domain.Timing(judge_wait_s=30, gate_wait_s=10, retention_s=1000)
SCENARIO = scenario()
V = SCENARIO.version or ""
# the scenario's gating judges (its third, "polite", does not gate)
GATING = ("covered_expected_topics", "avoided_repetition")


class FakeCalibrations:
    def __init__(self) -> None:
        self.book = CalibrationBook()
        self.synced: list[float | None] = []
        self.readied = 0

    async def ready(self) -> None:
        self.readied += 1

    async def sync(self, arrived_at: float | None = None) -> None:
        self.synced.append(arrived_at)


class Verdict:
    """The steps with their fakes, and what they did."""

    def __init__(self, *scenarios: Scenario, **settings_given: Any) -> None:
        self.log = Log()
        settings = default_settings(**settings_given)
        self.registry = CollectorRegistry()
        self.reject = FakeDeadLetters(self.log, "verdict", settings)
        self.catalog = FakeCatalog(*(scenarios or (SCENARIO,)))
        self.join = FakeJoin(self.log, self.catalog, self.reject)
        self.calibrations = FakeCalibrations()
        self.steps = Steps(
            settings,
            TIMING,
            self.join,
            calibrations=self.calibrations,
            trial_verdicts="trial-verdicts",
            metrics=VerdictMetrics(self.registry),
            common=CommonMetrics(self.registry),
        )

    def count(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def events(self, note: str) -> float:
        return self.count("passk_events_total", processor="verdict", note=note)

    def verdicts(self) -> list[Any]:
        return [
            json.loads(value)
            for topic, _, value in self.log.of("send")
            if topic == "trial-verdicts"
        ]

    async def feed(self, *records: Any) -> None:
        for event in records:
            if event.message.topic == GATES:
                await self.steps.on_gate_result(event)
            else:
                await self.steps.on_judge_verdict(event)


def gates(passed: bool = True, trial: str = "t1") -> list[Any]:
    return [
        record(GATES, encode(gate_result(g, passed=passed, trial=trial, version=V)))
        for g in ("exit", "state")
    ]


def judges(trial: str = "t1", result: str = "passed") -> list[Any]:
    return [
        record(JUDGES, encode(judge_verdict(j, result, trial=trial, version=V))) for j in GATING
    ]


async def test_the_last_awaited_result_publishes_the_verdict_before_the_trial_is_stored() -> None:
    verdict = Verdict()
    *first, last = [*gates(), *judges()]
    await verdict.feed(*first)
    assert verdict.log.kinds() == ["store"] * 3 and verdict.verdicts() == []
    assert verdict.events("waiting") == 3
    last.message.timestamp = 1234.5
    await verdict.feed(last)
    assert verdict.log.kinds()[3:] == ["send", "store"]
    (published,) = verdict.verdicts()
    assert (published["trial_id"], published["outcome"]) == ("t1", "passed")
    key, stored = verdict.log.of("store")[-1]
    assert key == "t1" and stored.emitted_at is not None
    # gating decided on the calibrations published before the last input reached the broker
    assert verdict.calibrations.synced == [1234.5]
    assert verdict.events("emitted") == 1
    assert verdict.count("passk_trials_total", scenario=SCENARIO.id, outcome="passed") == 1


async def test_a_result_after_the_verdict_is_a_counted_repeat_and_sends_nothing() -> None:
    verdict = Verdict()
    await verdict.feed(*gates(), *judges())
    before = list(verdict.log.entries)
    await verdict.feed(gates()[0])
    assert verdict.log.entries == before
    assert verdict.count("passk_verdict_duplicates_total") == 1
    assert verdict.events("duplicate") == 1


async def test_an_undecodable_result_is_a_dead_letter_and_nothing_else() -> None:
    verdict = Verdict()
    await verdict.feed(record(GATES, b"[1, 2]"))
    assert verdict.log.kinds() == ["reject"]
    assert verdict.log.reasons() == ["not_an_object"]


async def test_a_result_of_an_unpublished_scenario_version_is_refused() -> None:
    verdict = Verdict()
    await verdict.feed(record(GATES, encode(gate_result("exit", version="never"))))
    assert verdict.log.reasons() == ["unknown_scenario_version"]
    assert verdict.join.states == {}


async def test_a_second_trial_reusing_the_id_is_refused_and_the_first_kept() -> None:
    verdict = Verdict()
    await verdict.feed(gates()[0])
    stranger = gate_result("state", version=V).model_copy(update={"run_id": "run-2"})
    await verdict.feed(record(GATES, encode(stranger)))
    assert verdict.log.kinds() == ["store", "reject"]
    assert verdict.log.reasons() == ["trial_id_conflict"]
    assert set(verdict.join.states["t1"].gates) == {"exit"}


async def test_a_failed_gate_still_waits_for_the_judges_then_the_trial_fails() -> None:
    verdict = Verdict()
    await verdict.feed(*gates(passed=False), *judges())
    (published,) = verdict.verdicts()
    assert published["outcome"] == "failed"
    assert verdict.count("passk_trials_total", scenario=SCENARIO.id, outcome="failed") == 1


async def test_a_tick_past_the_judge_wait_publishes_with_what_is_missing() -> None:
    verdict = Verdict()
    await verdict.feed(*gates())
    key, waiting = verdict.log.of("store")[-1]
    tick = record("p.verdict-ticks", None, key=b"t1")
    await verdict.steps.on_tick(tick, key, waiting, time.time() + TIMING.judge_wait_s + 1)
    assert verdict.log.kinds()[-2:] == ["send", "store"]
    (published,) = verdict.verdicts()
    assert published["outcome"] != "passed"  # a gating judge that never came is no pass
    assert verdict.log.of("store")[-1][1].emitted_at is not None
    assert verdict.events("deadline") == 1
    # no input arrived for it: the calibrations are synced up to now
    assert verdict.calibrations.synced == [None]


async def test_a_tick_before_the_wait_does_nothing() -> None:
    verdict = Verdict()
    await verdict.feed(*gates())
    key, waiting = verdict.log.of("store")[-1]
    before = list(verdict.log.entries)
    await verdict.steps.on_tick(record("p.verdict-ticks", None), key, waiting, time.time())
    assert verdict.log.entries == before


async def test_an_emitted_trial_past_the_retention_is_forgotten() -> None:
    verdict = Verdict()
    await verdict.feed(*gates(), *judges())
    key, emitted = verdict.log.of("store")[-1]
    await verdict.steps.on_tick(
        record("p.verdict-ticks", None), key, emitted, emitted.emitted_at + TIMING.retention_s + 1
    )
    assert verdict.log.of("store")[-1] == ("t1", None)
    assert len(verdict.verdicts()) == 1


async def test_a_trial_whose_scenario_left_the_catalog_is_held_and_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    verdict = Verdict()
    await verdict.feed(*gates())
    key, waiting = verdict.log.of("store")[-1]
    verdict.catalog.by.clear()
    before = list(verdict.log.entries)
    with caplog.at_level(logging.ERROR):
        await verdict.steps.on_tick(
            record("p.verdict-ticks", None), key, waiting, time.time() + TIMING.judge_wait_s + 1
        )
    assert verdict.log.entries == before  # nothing published, the state kept for a next tick
    assert verdict.events("scenario_missing") == 1
    assert "left the catalog; verdict held" in caplog.text


async def test_before_the_first_record_the_calibrations_are_read_and_series_made() -> None:
    verdict = Verdict()
    await verdict.steps.before()
    assert verdict.calibrations.readied == 1
    assert (
        verdict.registry.get_sample_value(
            "passk_trials_total", {"scenario": SCENARIO.id, "outcome": "error"}
        )
        == 0.0
    )


async def test_the_scenario_series_wait_for_the_catalog() -> None:
    verdict = Verdict()
    verdict.catalog.is_ready = False
    await verdict.steps.known_scenarios()
    assert (
        verdict.registry.get_sample_value(
            "passk_trials_total", {"scenario": SCENARIO.id, "outcome": "passed"}
        )
        is None
    )
    verdict.catalog.is_ready = True
    await verdict.steps.known_scenarios()
    assert (
        verdict.registry.get_sample_value(
            "passk_trials_total", {"scenario": SCENARIO.id, "outcome": "passed"}
        )
        == 0.0
    )


@pytest.mark.parametrize(
    ("uncalibrated", "outcome"), [("gating", "failed"), ("advisory", "passed")]
)
async def test_an_uncalibrated_judge_gates_as_the_settings_say(
    uncalibrated: str, outcome: str
) -> None:
    verdict = Verdict(PASSK_UNCALIBRATED_JUDGES=uncalibrated)
    await verdict.feed(*gates(), *judges(result="failed"))
    (published,) = verdict.verdicts()
    assert published["outcome"] == outcome
