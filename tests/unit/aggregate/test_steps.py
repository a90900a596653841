"""The aggregate's steps with fake ports: what is re-keyed, refused, counted, written (and as
which verdict) and published, and in which order. Expected figures are counted by hand
from the verdicts written here."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from schemas.events import ScenarioReliability
from services.aggregate.metrics import AggregateMetrics, ReliabilityGauges
from services.aggregate.steps import Steps
from services.contract.codec import decode, encode
from services.kafka.catalog import CatalogUnavailable
from services.runtime.faust_compat import current_event
from services.runtime.metrics import CommonMetrics
from tests.unit.aggregate.test_domain import NOW, T0, verdict
from tests.unit.factories import scenario
from tests.unit.fakes import RecordedDeadLetters, default_settings

BY_SCENARIO = "t.aggregate-by-scenario"
RELIABILITY = "t.scenario-reliability.v1"


class Event:
    """A record as Faust hands it (weakly referable: Faust holds the current one so)."""

    def __init__(self, value: bytes, partition: int = 0, offset: int = 0) -> None:
        self.value = value
        self.message = _Message(value, partition, offset)


class _Message:
    def __init__(self, value: bytes, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = BY_SCENARIO, partition, offset
        self.key, self.value, self.timestamp = b"k", value, 0.0


class Table(dict[str, Any]):
    """The table; each write noted with the event it was made as (its changelog partition)."""

    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        super().__init__()
        self.log = log

    def __setitem__(self, key: str, value: Any) -> None:
        self.log.append(("stored", key, current_event()))
        super().__setitem__(key, value)

    def pop(self, key: str, default: Any = None) -> Any:
        self.log.append(("dropped", key, current_event()))
        return super().pop(key, default)


class Catalog:
    def __init__(self, scenarios: list[Any] | None) -> None:
        self.scenarios = scenarios

    async def ready(self) -> None:
        if self.scenarios is None:
            raise CatalogUnavailable("no scenarios topic yet")

    def latest(self) -> dict[str, Any]:
        return {s.id: s for s in self.scenarios or []}


class Harness:
    def __init__(self, catalog: list[Any] | None = None, **env: Any) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.state = Table(self.log)
        settings = default_settings(PASSK_TOPIC_PREFIX="t.", **env)
        self.reject = RecordedDeadLetters("aggregate", settings)
        self.registry = CollectorRegistry()
        self.steps = Steps(
            settings=settings,
            processor="aggregate",
            state=self.state,
            send=self.send,
            by_scenario=BY_SCENARIO,
            reject=self.reject,
            catalog=Catalog(catalog),  # type: ignore[arg-type]
            gauges=ReliabilityGauges(self.registry),
            metrics=AggregateMetrics(self.registry),
            events=CommonMetrics(self.registry).events,
            clock=lambda: NOW,
        )

    async def send(self, topic: str, key: bytes, value: bytes) -> None:
        self.log.append(("sent", topic, key, value))

    def published(self) -> list[ScenarioReliability]:
        out = []
        for entry in self.log:
            if entry[0] == "sent" and entry[1] == RELIABILITY:
                r = decode(entry[3], ScenarioReliability)
                assert isinstance(r, ScenarioReliability)
                out.append(r)
        return out

    def writes(self) -> list[tuple[Any, ...]]:
        return [e for e in self.log if e[0] in ("stored", "dropped")]

    def count(self, note: str) -> tuple[float | None, float | None]:
        return (
            self.registry.get_sample_value("passk_aggregate_verdicts_total", {"note": note}),
            self.registry.get_sample_value(
                "passk_events_total", {"processor": "aggregate", "note": note}
            ),
        )

    def gauge(self, name: str, scenario_id: str, window: str) -> float | None:
        return self.registry.get_sample_value(
            f"passk_scenario_{name}", {"scenario": scenario_id, "window": window}
        )


def event(
    trial: str,
    outcome: str = "passed",
    *,
    at: float = T0 + 10,
    scenario: str = "s1",
    partition: int = 0,
) -> Event:
    return Event(
        encode(verdict(trial, outcome, at=at, scenario=scenario)),  # type: ignore[arg-type]
        partition,
    )


# ------------------------------------------------------------------------- rekey


async def test_a_verdict_goes_on_unchanged_keyed_by_its_scenario() -> None:
    h = Harness()
    e = event("a", scenario="s9")
    await h.steps.rekey(e)
    assert h.log == [("sent", BY_SCENARIO, b"s9", e.value)]


async def test_an_unreadable_verdict_is_dead_lettered_not_rekeyed() -> None:
    h = Harness()
    bad = Event(b"[1, 2]")
    await h.steps.rekey(bad)
    assert [(e, r.reason) for e, r in h.reject.sent] == [(bad, "not_an_object")]
    assert h.log == []


# ------------------------------------------------------------------------- count


async def test_a_batch_is_counted_once_per_bucket_and_published_after_its_writes() -> None:
    h = Harness()
    await h.steps.count([event("a"), event("b", "failed"), event("c")])
    published = h.published()
    # run-1, the hour and the day of T0: one figure each for the whole batch
    assert sorted(f"{r.run_id}/{r.window}" for r in published) == [
        "None/1d",
        "None/1h",
        "run-1/None",
    ]
    for r in published:
        assert (r.passed, r.failed, r.errors, r.n) == (2, 1, 0, 3)
    kinds = [e[0] for e in h.log]
    assert kinds.index("sent") > max(i for i, k in enumerate(kinds) if k == "stored")
    assert {e[2] for e in h.log if e[0] == "sent"} == {b"s1"}
    assert h.count("counted") == (3, 3)


async def test_each_write_is_made_as_the_verdict_that_made_it() -> None:
    h = Harness()
    a, b = event("a"), event("b", scenario="s2")
    await h.steps.count([a, b])
    assert h.writes(), "nothing written"
    for _, key, made_as in h.writes():
        assert made_as is (b if key.startswith(("t|s2|", "b|s2|", "l|s2|")) else a), key
    assert ("stored", "t|s1|a", a) in h.log and ("stored", "t|s2|b", b) in h.log


async def test_a_repeated_verdict_counts_nothing_and_publishes_the_same_figures() -> None:
    h = Harness()
    await h.steps.count([event("a")])
    first = {r.event_id for r in h.published()}
    h.log.clear()
    await h.steps.count([event("a")])
    assert {r.event_id for r in h.published()} == first  # the same event ids: dropped later
    assert h.writes() == []
    assert h.count("duplicate") == (1, 1) and h.count("counted") == (1, 1)


async def test_a_bad_record_in_a_batch_is_dead_lettered_and_the_rest_counted() -> None:
    h = Harness()
    bad = Event(b"\xff\xfe")
    await h.steps.count([event("a"), bad, event("b")])
    assert [(e, r.reason) for e, r in h.reject.sent] == [(bad, "invalid_utf8")]
    (run,) = [r for r in h.published() if r.run_id == "run-1"]
    assert run.n == 2
    assert h.count("counted") == (2, 2)


async def test_a_window_figure_carries_the_default_target_then_the_scenarios_own() -> None:
    h = Harness(
        catalog=[scenario(id="s1", alert={"min_pass_hat_k": 0.5, "min_trials": 4})],
        PASSK_ALERT_MIN_PASS_HAT_K=0.9,
        PASSK_ALERT_MIN_TRIALS=20,
    )
    await h.steps.count([event("a")])
    targets = {(r.alert_min_pass_hat_k, r.alert_min_trials) for r in h.published() if r.window}
    assert targets == {(0.9, 20)}
    await h.steps.alert_targets()
    h.log.clear()
    await h.steps.count([event("b")])
    targets = {(r.alert_min_pass_hat_k, r.alert_min_trials) for r in h.published() if r.window}
    assert targets == {(0.5, 4)}
    (run,) = [r for r in h.published() if r.run_id]
    assert run.alert_min_pass_hat_k is None  # a run has no alert


async def test_no_catalog_yet_leaves_the_targets_to_the_defaults(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(catalog=None)
    with caplog.at_level(logging.WARNING):
        await h.steps.alert_targets()
    assert "aggregate: no scenarios topic yet" in caplog.text
    assert (
        h.registry.get_sample_value("passk_scenario_alert_min_trials", {"scenario": "s1"}) is None
    )


async def test_a_watermark_past_the_retention_drops_old_state_as_the_verdict_that_moved_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(PASSK_DEDUP_RETENTION_S=3600)
    await h.steps.count([event("a", at=T0 + 10)])
    h.log.clear()
    later = event("b", at=T0 + 3 * 86400)
    with caplog.at_level(logging.INFO):
        await h.steps.count([later])
    dropped = {key: made_as for kind, key, made_as in h.writes() if kind == "dropped"}
    hour, day = int(T0) - int(T0) % 3600, int(T0) - int(T0) % 86400
    assert set(dropped) == {"t|s1|a", f"b|s1|w|1h|{hour}", f"b|s1|w|1d|{day}"}
    assert all(made_as is later for made_as in dropped.values())
    assert "b|s1|run|run-1" in h.state  # runs are kept
    assert "partition 0 dropped 3 expired entries" in caplog.text


async def test_recovered_gauges_show_only_the_assigned_partitions() -> None:
    h = Harness()
    await h.steps.count(
        [event("a", scenario="mine", partition=0), event("b", scenario="theirs", partition=1)]
    )
    assert h.gauge("trials", "theirs", "1h") == 1
    h.steps.restore_gauges({0})
    assert h.gauge("trials", "mine", "1h") == 1 and h.gauge("trials", "mine", "1d") == 1
    assert h.gauge("trials", "theirs", "1h") is None
