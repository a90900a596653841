"""What the gate and the judge do first with a re-grade request: read it and find the
scenario version it names. A request that cannot be used (undecodable, a version never
published) goes to the dead letters, like any input."""

from __future__ import annotations

from schemas.events import RegradeRequest
from schemas.scenario import Scenario
from services.contract.codec import Rejection, decode_or_reject
from services.contract.settings import Settings
from services.kafka.catalog import SCENARIO_GRACE_S, ScenarioCatalog, unknown_scenario
from services.runtime.app import DeadLetters, Record


async def read_regrade(
    event: Record,
    catalog: ScenarioCatalog,
    reject: DeadLetters,
    settings: Settings,
    *,
    grace_s: float = SCENARIO_GRACE_S,
) -> tuple[RegradeRequest, Scenario] | None:
    """The request and its scenario version, or None once the event is a dead letter.
    `grace_s`: how long to wait for a version published moments ago."""
    request = decode_or_reject(event.value, RegradeRequest, settings)
    if isinstance(request, Rejection):
        await reject(event, request)
        return None
    scenario = await catalog.published(
        request.scenario_id, request.scenario_version, timeout=grace_s
    )
    if scenario is None:
        await reject(event, unknown_scenario(request.scenario_id, request.scenario_version))
        return None
    return request, scenario
