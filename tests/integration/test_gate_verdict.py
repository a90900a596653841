"""The gate and verdict processors, as Faust workers, through the real broker."""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path

import pytest

from schemas.events import TrialMetrics
from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.support import (
    isolated_env,
    letter_key,
    produce,
    publish_scenarios,
    read_topic,
    settled,
    wait_for,
    workers,
)
from tests.unit.factories import GOOD_STATE, conversation, gate_result, scenario, session

pytestmark = pytest.mark.integration


def _send(settings: Settings, events: list) -> None:
    for ev in events:
        topic = (
            Topic.CONVERSATION_FINISHED
            if ev.type == "conversation_finished"
            else Topic.SESSION_PERSISTED
        )
        produce(settings, topic, [(ev.session_id, encode(ev))])


def test_gates_and_verdicts_for_every_case(settings: Settings, tmp_path: Path) -> None:
    sc = scenario(judges=[])  # gates only: no judge processor needed here
    publish_scenarios(settings, [sc])
    bad_state = {**GOOD_STATE, "report": {**GOOD_STATE["report"], "fault": ""}}
    cases = {
        # trial: (events in send order, expected outcome, expected failing check)
        "clean": ([conversation("clean"), session("clean")], "passed", None),
        "early": ([session("early"), conversation("early")], "passed", None),
        "field-never-stored": (
            [conversation("field-never-stored"), session("field-never-stored", state=bad_state)],
            "failed",
            "gate:state",
        ),
        "not-closed": (
            [conversation("not-closed", exit_reason="persona_exhausted"), session("not-closed")],
            "failed",
            "gate:exit",
        ),
        "follow-up": (
            [
                conversation("follow-up"),
                session("follow-up", state={**GOOD_STATE, "follow_up": {"at": "mon"}}),
            ],
            "failed",
            "gate:state",
        ),
        "too-long": (
            [
                conversation("too-long", metrics=TrialMetrics(turns=31, duration_ms=5)),
                session("too-long"),
            ],
            "failed",
            "gate:exit",
        ),
        "never-persisted": ([conversation("never-persisted")], "failed", "gate:state"),
        "duplicated": (
            [
                conversation("duplicated"),
                conversation("duplicated"),
                session("duplicated"),
                session("duplicated"),
            ],
            "passed",
            None,
        ),
    }
    env = isolated_env(settings)
    log = tmp_path / "workers.log"
    with workers(settings, ["gate", "verdict"], env, log, timeout=90):
        for events, _, _ in cases.values():
            _send(settings, events)
        # malformed input: each goes to the dead-letter topic with its own reason
        produce(
            settings,
            Topic.CONVERSATION_FINISHED,
            [
                ("bad-1", b"{not json"),
                ("bad-2", b"\xff\xfe"),
                ("bad-3", json.dumps({"event_id": "x", "type": "conversation_finished"}).encode()),
                (
                    "bad-4",
                    json.dumps(
                        {**json.loads(encode(conversation("v9"))), "schema_version": 9}
                    ).encode(),
                ),
                ("bad-5", encode(conversation("ghost", scenario_id="no-such-scenario"))),
            ],
        )
        verdicts = read_topic(settings, Topic.TRIAL_VERDICTS, min_count=len(cases), timeout=60)
        # a replay of an already graded trial, and a redelivered gate result: no new verdict
        _send(settings, [conversation("clean"), session("clean")])
        produce(
            settings,
            Topic.GATE_RESULTS,
            [("early", encode(gate_result("exit", trial="early", version=sc.version or "")))],
        )
        wait_for(lambda: settled(settings, ["gate", "verdict"]), timeout=60, what="settled")
        verdicts = read_topic(settings, Topic.TRIAL_VERDICTS)
        dead = read_topic(settings, Topic.DEAD_LETTERS, min_count=5)
        gates = read_topic(settings, Topic.GATE_RESULTS)

    per_trial = Counter(v["trial_id"] for _, v, _ in verdicts)
    assert per_trial == Counter(list(cases)), "exactly one verdict per trial"
    by_trial = {v["trial_id"]: v for _, v, _ in verdicts}
    for trial, (_, outcome, check) in cases.items():
        verdict = by_trial[trial]
        assert verdict["outcome"] == outcome, (trial, verdict["failed_checks"])
        assert verdict["k"] == 3 and verdict["scenario_version"] == sc.version
        if check:
            assert [c["check"] for c in verdict["failed_checks"]] == [check], trial
    never = by_trial["never-persisted"]["failed_checks"][0]["reason"]
    assert never == f"no persisted session within {settings.session_wait_s:g} s"
    assert "report.fault" in by_trial["field-never-stored"]["failed_checks"][0]["reason"]

    # two gate results per trial (the replayed trial was recognised, not re-graded)
    gate_ids = Counter(v["event_id"] for _, v, _ in gates)
    assert all(n == 1 for eid, n in gate_ids.items() if "clean" in eid)
    assert len({(v["trial_id"], v["gate"]) for _, v, _ in gates}) == 2 * len(cases)

    reasons = {letter_key(d): d for _, d, _ in dead}
    assert reasons["bad-1"]["reason"] == "invalid_json"
    assert reasons["bad-2"]["reason"] == "invalid_utf8"
    assert reasons["bad-3"]["reason"] == "missing_field"
    assert "trial_id" in reasons["bad-3"]["detail"]
    assert reasons["bad-4"]["reason"] == "unknown_schema_version"
    assert reasons["bad-5"]["reason"] == "unknown_scenario"
    for d in reasons.values():
        assert d["source_topic"].endswith("conversation-finished.v1") and d["offset"] is not None
    assert base64.b64decode(reasons["bad-1"]["value_b64"]) == b"{not json"
