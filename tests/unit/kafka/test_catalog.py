"""Finding the scenario an input names: at once, after a moment's wait, or refused."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from services.contract.scenario_records import encode_scenario
from services.contract.settings import Settings
from services.kafka.catalog import ScenarioCatalog, unknown_scenario
from tests.unit.factories import scenario


def _read(catalog: ScenarioCatalog, **overrides: object) -> None:
    key, value = encode_scenario(scenario(**overrides))
    catalog.on_record(SimpleNamespace(key=key, value=value, topic="t", partition=0, offset=0))
    catalog.on_batch()


async def test_a_scenario_already_read_is_found_at_once() -> None:
    catalog = ScenarioCatalog(Settings())
    _read(catalog, id="refund")
    found = await catalog.published("refund", timeout=0.0)
    assert found is not None and found.id == "refund"


async def test_a_scenario_read_moments_later_is_waited_for() -> None:
    catalog = ScenarioCatalog(Settings())
    waiting = asyncio.ensure_future(catalog.published("refund", timeout=5.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    _read(catalog, id="refund")
    found = await asyncio.wait_for(waiting, 5.0)
    assert found is not None and found.id == "refund"


async def test_a_version_never_published_is_none_after_the_grace() -> None:
    catalog = ScenarioCatalog(Settings())
    _read(catalog, id="refund")
    version = catalog.get("refund").version  # type: ignore[union-attr]
    assert await catalog.published("refund", version + "-other", timeout=0.05) is None
    assert await catalog.published("refund", version, timeout=0.0) is not None


def test_the_refusal_names_the_scenario_and_the_version_when_one_was_named() -> None:
    bare = unknown_scenario("refund")
    versioned = unknown_scenario("refund", "v7")
    assert bare.reason == "unknown_scenario"
    assert versioned.reason == "unknown_scenario_version"
    assert "'refund'" in bare.detail and "version" not in bare.detail
    assert "'refund' version 'v7'" in versioned.detail
