"""The judge's handling of one record, with the ports faked: what is refused (and why),
what is sent (and through which way out), what is counted."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry

from schemas.events import JudgeRequest, JudgeVerdict, RegradeRequest
from services.contract.codec import encode
from services.contract.settings import Settings
from services.judge.steps import Steps
from services.runtime.metrics import CommonMetrics
from services.runtime.outage import STORE, Dependency, OutageMetrics
from tests.unit.factories import conversation, judge_verdict, scenario
from tests.unit.fakes import RecordedDeadLetters, default_settings

SCENARIO = scenario()
AWAITS_GATES = scenario(judging={"skip_when_gates_fail": True})


def record(value: bytes | None, *, timestamp: float | None = None) -> Any:
    return SimpleNamespace(
        value=value,
        message=SimpleNamespace(
            topic="conversation-finished",
            partition=0,
            offset=7,
            key=b"t1",
            value=value,
            timestamp=timestamp,
        ),
    )


class Catalog:
    def __init__(self, *scenarios: Any, ready: bool = True) -> None:
        self.scenarios = {s.id: s for s in scenarios}
        self.is_ready = ready
        self.asked: list[tuple[str, str | None]] = []

    async def published(
        self, scenario_id: str, version: str | None = None, *, timeout: float = 0.0
    ) -> Any:
        self.asked.append((scenario_id, version))
        found = self.scenarios.get(scenario_id)
        if found is None or (version is not None and version != found.version):
            return None
        return found

    def latest(self) -> dict[str, Any]:
        return self.scenarios


class Grader:
    def __init__(self, verdicts: list[JudgeVerdict]) -> None:
        self.verdicts = verdicts
        self.graded: list[tuple[str, str]] = []
        self.after_gates: list[tuple[str, list[str]]] = []

    async def grade(self, trial: Any, scenario: Any, sample_rate: Any = None) -> list[JudgeVerdict]:
        self.graded.append((trial.trial_id, scenario.id))
        return self.verdicts

    async def grade_after_gates(
        self, trial: Any, scenario: Any, failed: list[str]
    ) -> list[JudgeVerdict]:
        self.after_gates.append((trial.trial_id, failed))
        return self.verdicts


class Judge:
    """Steps with every port faked, and what went through each."""

    def __init__(
        self, *scenarios: Any, settings: Settings | None = None, catalog_ready: bool = True
    ) -> None:
        settings = settings or default_settings()
        self.letters = RecordedDeadLetters("judge", settings)  # the app gives both the same
        self.rejected = self.letters.sent
        self.sent: list[tuple[str, bytes, JudgeVerdict]] = []
        self.known: list[set[str]] = []
        self.made = 0
        self.grader = Grader(
            [
                judge_verdict("covered_expected_topics"),
                judge_verdict("polite", result="failed", gating=False),
            ]
        )
        self.catalog = Catalog(*(scenarios or (SCENARIO,)), ready=catalog_ready)
        self.common = CommonMetrics(CollectorRegistry())

        def way_out(name: str) -> Any:
            async def send(key: bytes, value: bytes) -> None:
                self.sent.append((name, key, JudgeVerdict.model_validate_json(value)))

            return send

        def make_grader() -> Grader:
            self.made += 1
            return self.grader

        self.steps = Steps(
            settings,
            catalog=self.catalog,
            reject=self.letters,  # type: ignore[arg-type]
            send_verdict=way_out("batch"),
            send_verdict_after_gates=way_out("after_gates"),
            deliver_regraded=way_out("regrade"),
            make_grader=make_grader,  # type: ignore[arg-type]
            store=Dependency(STORE, "test", metrics=OutageMetrics(CollectorRegistry())),
            metrics=SimpleNamespace(known_judges=self.known.append),  # type: ignore[arg-type]
            processor="judge",
            common=self.common,
        )

    def counted(self, note: str) -> float:
        return self.common.events.labels("judge", note)._value.get()

    def reasons(self) -> list[str]:
        return self.letters.reasons()


async def test_a_trial_gets_the_graders_verdicts_keyed_by_trial_and_is_counted_graded() -> None:
    judge = Judge()
    await judge.steps.judge_trial(record(encode(conversation("t9"))))
    assert judge.rejected == []
    assert judge.grader.graded == [("t9", SCENARIO.id)]
    assert [(way, key, v.event_id) for way, key, v in judge.sent] == [
        ("batch", b"t9", "judge:t1:covered_expected_topics:v1"),
        ("batch", b"t9", "judge:t1:polite:v1"),
    ]
    assert judge.counted("graded") == 1


async def test_an_undecodable_trial_is_a_dead_letter_and_no_model_is_asked() -> None:
    judge = Judge()
    bad = record(b"{not json")
    await judge.steps.judge_trial(bad)
    assert judge.rejected[0][0] is bad
    assert judge.reasons() == ["invalid_json"]
    assert judge.sent == [] and judge.made == 0
    assert judge.counted("graded") == 0


async def test_a_trial_dated_past_the_skew_after_its_broker_time_is_refused() -> None:
    judge = Judge()
    arrived = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    trial = conversation(occurred_at=arrived + timedelta(hours=1))
    await judge.steps.judge_trial(record(encode(trial), timestamp=arrived.timestamp()))
    assert judge.reasons() == ["occurred_at_in_future"]
    assert judge.sent == [] and judge.grader.graded == []


async def test_a_trial_within_the_skew_of_its_broker_time_is_graded() -> None:
    judge = Judge()
    arrived = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    trial = conversation(occurred_at=arrived + timedelta(seconds=60))  # skew: 300 s
    await judge.steps.judge_trial(record(encode(trial), timestamp=arrived.timestamp()))
    assert judge.rejected == []
    assert len(judge.sent) == 2


async def test_a_trial_of_an_unpublished_scenario_is_refused_as_unknown_scenario() -> None:
    judge = Judge()
    await judge.steps.judge_trial(record(encode(conversation(scenario_id="nowhere"))))
    assert judge.reasons() == ["unknown_scenario"]
    assert "'nowhere'" in judge.rejected[0][1].detail
    assert judge.sent == [] and judge.made == 0


async def test_a_trial_whose_judges_wait_for_the_gates_sends_nothing_yet() -> None:
    judge = Judge(AWAITS_GATES)
    await judge.steps.judge_trial(record(encode(conversation())))
    assert judge.rejected == [] and judge.sent == [] and judge.grader.graded == []
    assert judge.counted("awaiting_gates") == 1
    assert judge.counted("graded") == 0


async def test_the_grader_is_made_once_for_trials_graded_at_once() -> None:
    judge = Judge()
    await asyncio.gather(
        *(judge.steps.judge_trial(record(encode(conversation(f"t{i}")))) for i in range(5))
    )
    assert judge.made == 1
    assert len(judge.grader.graded) == 5


def judge_request(passed: bool, failed: list[str]) -> JudgeRequest:
    trial = conversation("t3")
    return JudgeRequest(
        event_id="jr-t3",
        trial_id="t3",
        scenario_id=AWAITS_GATES.id,
        scenario_version="v1",
        gates_passed=passed,
        failed_gates=failed,
        conversation=trial,
    )


async def test_gates_that_passed_have_every_judge_graded_through_the_request_outbox() -> None:
    judge = Judge(AWAITS_GATES)
    await judge.steps.judge_after_gates(record(encode(judge_request(True, []))))
    assert judge.grader.after_gates == [("t3", [])]
    assert {way for way, _, _ in judge.sent} == {"after_gates"}
    assert [key for _, key, _ in judge.sent] == [b"t3", b"t3"]
    assert judge.counted("graded") == 1 and judge.counted("skipped") == 0


async def test_gates_that_failed_are_named_to_the_grader_and_counted_skipped() -> None:
    judge = Judge(AWAITS_GATES)
    await judge.steps.judge_after_gates(record(encode(judge_request(False, ["outcome"]))))
    assert judge.grader.after_gates == [("t3", ["outcome"])]
    assert judge.counted("skipped") == 1 and judge.counted("graded") == 0


async def test_gates_that_failed_without_a_name_are_passed_on_as_unknown() -> None:
    judge = Judge(AWAITS_GATES)
    await judge.steps.judge_after_gates(record(encode(judge_request(False, []))))
    assert judge.grader.after_gates == [("t3", ["?"])]


async def test_a_judge_request_may_be_twice_an_inputs_size_but_no_more() -> None:
    request = encode(judge_request(True, []))
    settings = default_settings(PASSK_MAX_EVENT_BYTES=len(request) // 2 + 1)
    fits = Judge(AWAITS_GATES, settings=settings)
    await fits.steps.judge_after_gates(record(request))
    assert fits.rejected == [] and len(fits.sent) == 2

    settings = default_settings(PASSK_MAX_EVENT_BYTES=len(request) // 2 - 1)
    too_big = Judge(AWAITS_GATES, settings=settings)
    await too_big.steps.judge_after_gates(record(request))
    assert too_big.reasons() == ["oversized"]
    assert too_big.sent == []


async def test_a_judge_request_for_an_unpublished_scenario_is_refused() -> None:
    judge = Judge(SCENARIO)  # AWAITS_GATES shares its id: drop it from the catalog
    judge.catalog.scenarios = {}
    await judge.steps.judge_after_gates(record(encode(judge_request(True, []))))
    assert judge.reasons() == ["unknown_scenario"]
    assert judge.sent == [] and judge.grader.after_gates == []


def regrade_request(version: str, attempt: int = 3) -> bytes:
    trial = conversation("t5")
    return encode(
        RegradeRequest(
            event_id="rg-t5",
            trial_id="t5",
            run_id="run-1",
            scenario_id=SCENARIO.id,
            scenario_version=version,
            session_id="s-t5",
            attempt=attempt,
            conversation=trial,
        )
    )


async def test_a_regrade_sends_its_verdicts_under_the_attempt_with_new_event_ids() -> None:
    judge = Judge()
    await judge.steps.regrade(record(regrade_request(SCENARIO.version or "", attempt=3)))
    assert judge.catalog.asked == [(SCENARIO.id, SCENARIO.version)]
    assert [(way, key, v.event_id, v.attempt) for way, key, v in judge.sent] == [
        ("regrade", b"t5", "judge:t1:covered_expected_topics:v1:attempt-3", 3),
        ("regrade", b"t5", "judge:t1:polite:v1:attempt-3", 3),
    ]
    assert judge.counted("regraded") == 1


async def test_a_regrade_of_a_version_never_published_is_refused() -> None:
    judge = Judge()
    await judge.steps.regrade(record(regrade_request("not-a-version")))
    assert judge.reasons() == ["unknown_scenario_version"]
    assert "'not-a-version'" in judge.rejected[0][1].detail
    assert judge.sent == [] and judge.counted("regraded") == 0


async def test_an_undecodable_regrade_request_is_refused() -> None:
    judge = Judge()
    await judge.steps.regrade(record(json.dumps({"type": "regrade_request"}).encode()))
    assert judge.reasons() == ["missing_field"]
    assert judge.sent == [] and judge.made == 0


async def test_the_known_judges_are_every_judge_of_the_catalog_once_it_is_ready() -> None:
    other = scenario(id="other", judges=[{"id": "brief", "assertion": "Was brief."}])
    judge = Judge(SCENARIO, other)
    await judge.steps.known_judges()
    assert judge.known == [{"covered_expected_topics", "avoided_repetition", "polite", "brief"}]


async def test_no_judge_is_noted_before_the_catalog_is_read() -> None:
    judge = Judge(catalog_ready=False)
    await judge.steps.known_judges()
    assert judge.known == []


async def test_a_pinned_trial_is_graded_against_the_version_it_names() -> None:
    judge = Judge()
    await judge.steps.judge_trial(
        record(encode(conversation("t9", scenario_version=SCENARIO.version)))
    )
    assert judge.catalog.asked == [(SCENARIO.id, SCENARIO.version)]
    assert judge.grader.graded == [("t9", SCENARIO.id)] and judge.rejected == []


async def test_a_trial_pinned_to_a_version_never_published_is_refused_unjudged() -> None:
    judge = Judge()
    await judge.steps.judge_trial(
        record(encode(conversation("t9", scenario_version="0123456789abcdef")))
    )
    assert judge.reasons() == ["unknown_scenario_version"]
    assert "'0123456789abcdef'" in judge.rejected[0][1].detail
    assert judge.sent == [] and judge.grader.graded == [] and judge.made == 0
