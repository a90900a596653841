from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from services.runtime.outage import BROKER, Dependency, OutageMetrics, health, read_health


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def registry() -> CollectorRegistry:
    health().down.clear()  # process-wide: start each test with every dependency up
    return CollectorRegistry()


@pytest.fixture
def health_file(tmp_path: Path) -> Iterator[Path]:
    """The process-wide health file, written under tmp_path for one test and off after."""
    health().path = tmp_path / "run" / "worker.health.json"
    yield health().path
    health().path = None


def test_backoff_grows_to_a_cap_and_a_success_resets_it(registry: CollectorRegistry) -> None:
    clock = Clock()
    dep = Dependency(
        BROKER,
        "test",
        first_backoff_s=0.5,
        max_backoff_s=4.0,
        clock=clock,
        metrics=OutageMetrics(registry),
    )
    delays = [dep.failed("op", OSError("down")) for _ in range(6)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert not dep.due()
    clock.t += 4.0
    assert dep.due()
    dep.succeeded()
    assert dep.up and dep.due() and dep.backoff_s() == 0.0


def test_one_warning_per_outage_every_failure_counted(
    registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = OutageMetrics(registry)
    dep = Dependency(BROKER, "gate: reading offsets", metrics=metrics)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            dep.failed("read_offsets", OSError("refused"))
        assert registry.get_sample_value("passk_degraded", {"dependency": "broker"}) == 1
        dep.succeeded()
        dep.succeeded()
        dep.failed("read_offsets", OSError("refused"))
    messages = [r.getMessage() for r in caplog.records]
    assert sum("unreachable" in m for m in messages) == 2  # two outages
    assert sum("reachable again" in m for m in messages) == 1
    assert (
        registry.get_sample_value("passk_broker_errors_total", {"operation": "read_offsets"}) == 6
    )


def test_degraded_until_every_caller_finds_it_back(
    registry: CollectorRegistry, health_file: Path
) -> None:
    metrics = OutageMetrics(registry)
    health().started("gate")
    a = Dependency(BROKER, "a", metrics=metrics)
    b = Dependency(BROKER, "b", metrics=metrics)
    a.failed("x", OSError())
    b.failed("y", OSError())
    a.succeeded()
    assert registry.get_sample_value("passk_degraded", {"dependency": "broker"}) == 1
    assert "broker" in read_health(health_file)["degraded"]  # type: ignore[index]
    b.succeeded()
    assert registry.get_sample_value("passk_degraded", {"dependency": "broker"}) == 0
    assert read_health(health_file)["degraded"] == {}  # type: ignore[index]
    health().started("gate")  # a restart
    assert read_health(health_file)["starts"] == 2  # type: ignore[index]


async def test_call_retries_an_agent_s_write_until_it_succeeds(registry: CollectorRegistry) -> None:
    dep = Dependency("store", "sink", first_backoff_s=0.001, metrics=OutageMetrics(registry))
    attempts = []

    async def write() -> str:
        attempts.append(1)
        if len(attempts) < 4:
            raise ConnectionError("db down")
        return "stored"

    assert await dep.call("write", write) == "stored"
    assert len(attempts) == 4 and dep.up
    assert registry.get_sample_value("passk_store_errors_total", {"operation": "write"}) == 3


# Issue 21, item 6: a store that holds a write (a lock) is degraded while it does.
async def test_a_call_that_does_not_return_is_degraded_until_it_does(
    registry: CollectorRegistry, caplog: pytest.LogCaptureFixture, health_file: Path
) -> None:
    import asyncio

    metrics = OutageMetrics(registry)
    release = asyncio.Event()
    health().started("sink")
    dep = Dependency("store", "sink: writing", metrics=metrics, slow_after_s=0.05)

    async def locked() -> str:
        await release.wait()
        return "written"

    with caplog.at_level(logging.WARNING):
        task = asyncio.create_task(dep.call("write", locked))
        for _ in range(200):
            if registry.get_sample_value("passk_degraded", {"dependency": "store"}) == 1:
                break
            await asyncio.sleep(0.01)
        assert "store" in read_health(health_file)["degraded"]  # type: ignore[index]
        release.set()
        assert await task == "written"
    assert registry.get_sample_value("passk_degraded", {"dependency": "store"}) == 0
    assert read_health(health_file)["degraded"] == {}  # type: ignore[index]
    messages = [r.getMessage() for r in caplog.records]
    assert any("store not answering" in m for m in messages), messages
    assert registry.get_sample_value("passk_store_errors_total", {"operation": "write"}) is None

    quick = Dependency("store", "quick", metrics=metrics, slow_after_s=5.0)

    async def fast() -> int:
        return 1

    assert await quick.call("write", fast) == 1
    await asyncio.sleep(0)
    assert quick.up


def test_the_heartbeat_is_in_the_file_and_on_metrics(
    registry: CollectorRegistry, health_file: Path
) -> None:
    metrics = OutageMetrics(registry)
    health().started("judge")
    assert "beat_at" not in read_health(health_file)  # type: ignore[operator]
    health().beat(metrics, now=1234.5)
    assert read_health(health_file)["beat_at"] == 1234.5  # type: ignore[index]
    assert registry.get_sample_value("passk_worker_heartbeat_timestamp_seconds") == 1234.5
