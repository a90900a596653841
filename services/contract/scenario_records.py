"""Scenario records on the compacted scenarios topic, and the catalog they fold into.

Pure: bytes in, scenarios out, no Kafka. Both the async catalog (Faust workers) and
the sync reader (CLIs) fold the topic through `CatalogState`, so they agree.
"""

from __future__ import annotations

import json
import logging

from pydantic import ValidationError

from schemas.scenario import Scenario
from services.contract.codec import nesting_depth

log = logging.getLogger(__name__)

# Validation refuses deeper scenarios before publishing; a record nested deeper than this
# was not written by `passk scenarios publish` and would overflow recursive code.
MAX_SCENARIO_DEPTH = 64
# Below kafka-python's default max_request_size (1 MiB) and the broker's message limit, so
# a scenario that validates can be published; validation refuses a larger one.
MAX_SCENARIO_RECORD_BYTES = 1_000_000


def record_key(scenario_id: str, version: str) -> bytes:
    """Each version has its own key (`id@version`): the topic is compacted, and a key per
    id would let compaction drop an old version that a late trial still names."""
    return f"{scenario_id}@{version}".encode()


def encode_scenario(scenario: Scenario) -> tuple[bytes, bytes]:
    """(key, value) for the scenarios topic. Only the fields written are sent, so an
    expectation keeps exactly the operator it was given (`equals: null` stays equals)."""
    if not scenario.version:
        scenario = scenario.versioned()
    assert scenario.version is not None
    return (
        record_key(scenario.id, scenario.version),
        scenario.model_dump_json(exclude_unset=True).encode(),
    )


def decode_scenario(value: bytes) -> Scenario:
    """A versioned scenario from a record value; ValueError says why it cannot be used."""
    try:
        data = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not UTF-8 JSON: {exc}") from exc
    except RecursionError as exc:
        raise ValueError("JSON nested deeper than the parser can follow") from exc
    if nesting_depth(data, MAX_SCENARIO_DEPTH) > MAX_SCENARIO_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_SCENARIO_DEPTH} levels")
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "(root)"
        raise ValueError(f"not a valid scenario: {where}: {first['msg']}") from exc
    # A record written without a version still names its content unambiguously.
    return scenario if scenario.version else scenario.versioned()


class CatalogState:
    """Every scenario version ever seen, and the latest per id (in log order).

    Old versions are kept because derived events name the version they were graded
    against. Records are keyed `id@version` (older ones by id alone); the latest of an
    id is the version written last (the topic has one partition, so log order is publish
    order, and compaction keeps a re-published version's newest record). A tombstone
    keyed by the bare id retires the id for new trials only.
    """

    def __init__(self) -> None:
        self._versions: dict[str, dict[str, Scenario]] = {}
        self._latest: dict[str, Scenario] = {}

    def apply(self, key: bytes | None, value: bytes | None, *, where: str = "") -> bool:
        """Fold one record in; a record that cannot be used is skipped with a warning."""
        if value is None:
            if key is not None:
                self._latest.pop(key.decode("utf-8", "replace"), None)
            return True
        name = key.decode("utf-8", "replace") if key is not None else None
        try:
            scenario = decode_scenario(value)
        except ValueError as exc:
            log.warning("skipping malformed scenario record %s(key %r): %s", where, key, exc)
            return False
        assert scenario.version is not None
        if name is not None and name not in (scenario.id, f"{scenario.id}@{scenario.version}"):
            log.warning(
                "scenario record %s is keyed %r but defines %r; using the id it defines",
                where,
                key,
                scenario.id,
            )
        if scenario.version is None:  # decode_scenario versions every record it accepts
            log.warning("skipping unversioned scenario record %s(key %r)", where, key)
            return False
        self._versions.setdefault(scenario.id, {})[scenario.version] = scenario
        self._latest[scenario.id] = scenario
        return True

    def get(self, scenario_id: str, version: str | None = None) -> Scenario | None:
        if version is None:
            return self._latest.get(scenario_id)
        return self._versions.get(scenario_id, {}).get(version)

    def latest(self) -> dict[str, Scenario]:
        return dict(self._latest)

    def versions(self, scenario_id: str) -> list[str]:
        return list(self._versions.get(scenario_id, {}))
