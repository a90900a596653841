from __future__ import annotations

import json
import logging

import pytest

from schemas.scenario import Scenario
from services.contract.scenario_records import CatalogState, decode_scenario, encode_scenario
from services.scenarios.publish import plan


def scenario(sid: str = "s1", trials: int = 3, **extra: object) -> Scenario:
    return Scenario.model_validate(
        {
            "id": sid,
            "trials": trials,
            "expected_exit": "product_closed",
            "outcome": [
                {"path": "follow_up", "equals": None},  # an explicit null stays `equals`
                {"path": "report.fault", "present": True},
            ],
            "judges": [{"id": "j1", "assertion": "asked about the fault", "rubric": "x"}],
            **extra,
        }
    ).versioned()


def test_encode_decode_round_trip_keeps_operators_and_version() -> None:
    original = scenario()
    key, value = encode_scenario(original)
    assert key == f"s1@{original.version}".encode()  # a key per version
    decoded = decode_scenario(value)
    assert decoded == original
    assert decoded.version == original.version == decoded.content_hash()
    assert [e.operator for e in decoded.outcome] == ["equals", "present"]
    assert decoded.judges[0].params == {"rubric": "x"}


def test_encode_versions_an_unversioned_scenario() -> None:
    bare = Scenario.model_validate({"id": "s", "expected_exit": "x"})
    _, value = encode_scenario(bare)
    assert json.loads(value)["version"] == bare.content_hash()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (b"\xff\xfe", "not UTF-8 JSON"),
        (b"{not json", "not UTF-8 JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"id": "s"}', "expected_exit"),
        (b'{"id": "s", "expected_exit": ["x"], "bogus": 1}', "bogus"),
    ],
)
def test_decode_says_why_a_record_is_unusable(value: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        decode_scenario(value)


def test_catalog_keeps_every_version_and_the_latest_in_log_order() -> None:
    state = CatalogState()
    v1, v2 = scenario(trials=3), scenario(trials=5)
    other = scenario("s2")
    for s in (v1, other, v2):
        assert state.apply(*encode_scenario(s))
    assert state.get("s1") == v2
    assert state.get("s1", v1.version) == v1
    assert state.get("s1", v2.version) == v2
    assert state.get("s1", "no-such-version") is None
    assert state.get("nope") is None
    assert state.versions("s1") == [v1.version, v2.version]
    assert set(state.latest()) == {"s1", "s2"}

    state.apply(*encode_scenario(v1))  # re-published old content becomes the latest again
    assert state.get("s1") == v1


def compact(records: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """What log compaction keeps: the last record of each key, in log order."""
    last = {key: offset for offset, (key, _) in enumerate(records)}
    return [r for offset, r in enumerate(records) if last[r[0]] == offset]


def test_compaction_loses_no_version_a_late_trial_may_name() -> None:
    v1, v2, v3 = scenario(trials=3), scenario(trials=5), scenario(trials=7)
    log = [encode_scenario(s) for s in (v1, v2, v1, v3)]  # v1 re-published in between
    state = CatalogState()
    for key, value in compact(log):
        state.apply(key, value)
    assert [state.get("s1", v.version) for v in (v1, v2, v3)] == [v1, v2, v3]
    assert state.get("s1") == v3


def test_a_record_keyed_by_the_bare_id_is_still_read() -> None:
    """Topics written before versions had their own keys."""
    state = CatalogState()
    s = scenario()
    assert state.apply(b"s1", encode_scenario(s)[1])
    assert state.get("s1") == s


def test_a_malformed_record_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    state = CatalogState()
    state.apply(*encode_scenario(scenario()))
    with caplog.at_level(logging.WARNING):
        assert state.apply(b"s1", b"{garbage", where="at t[0]@7 ") is False
    assert state.get("s1") is not None  # what was known is kept
    assert "skipping malformed scenario record at t[0]@7" in caplog.text


def test_a_tombstone_retires_the_id_but_keeps_its_versions() -> None:
    state = CatalogState()
    s = scenario()
    state.apply(*encode_scenario(s))
    state.apply(b"s1", None)
    assert state.get("s1") is None
    assert state.get("s1", s.version) == s


def test_a_record_keyed_differently_uses_the_id_it_defines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = CatalogState()
    _, value = encode_scenario(scenario("s1"))
    with caplog.at_level(logging.WARNING):
        state.apply(b"other", value)
    assert state.get("s1") is not None and state.get("other") is None
    assert "keyed b'other'" in caplog.text


def test_publish_plan_marks_new_updated_and_unchanged() -> None:
    a, b, b2 = scenario("a"), scenario("b", trials=3), scenario("b", trials=4)
    c = scenario("c")
    steps = plan([a, b2, c], {"b": b, "c": c})
    assert [(p.scenario.id, p.status, p.previous_version) for p in steps] == [
        ("a", "new", None),
        ("b", "updated", b.version),
        ("c", "unchanged", c.version),
    ]
