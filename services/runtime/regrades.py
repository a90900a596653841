"""What the gate and the judge do first with a re-grade request: read it and find the
scenario version it names. A request that cannot be used (undecodable, a version never
published) goes to the dead letters, like any input."""

from __future__ import annotations

import faust

from schemas.events import RegradeRequest
from schemas.scenario import Scenario
from services.contract.codec import Rejection, decode
from services.contract.settings import Settings
from services.kafka.catalog import ScenarioCatalog
from services.runtime.app import DeadLetters


async def read_regrade(
    event: faust.types.EventT, catalog: ScenarioCatalog, reject: DeadLetters,
    settings: Settings, *, grace_s: float,
) -> tuple[RegradeRequest, Scenario] | None:
    """The request and its scenario version, or None once the event is a dead letter.
    `grace_s`: how long to wait for a version published moments ago."""
    request = decode(event.value, RegradeRequest, max_bytes=settings.max_event_bytes,
                     max_depth=settings.max_json_depth)
    if isinstance(request, Rejection):
        await reject(event, request)
        return None
    scenario = catalog.get(request.scenario_id, request.scenario_version) or (
        await catalog.wait_for(request.scenario_id, request.scenario_version, timeout=grace_s))
    if scenario is None:
        await reject(event, Rejection(
            "unknown_scenario", f"scenario {request.scenario_id!r} version "
            f"{request.scenario_version!r} is not published on the scenarios topic"))
        return None
    return request, scenario
