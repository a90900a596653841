"""Trial identity conflicts through the real broker (issue 21, item 2), the hostile input
as the red team sent it: one trial id in run A (scenario S1) and run B (scenario S2),
and two trials of one run sharing a session id.

Before: the verdict mixed the two trials' results under one id (one verdict came out,
run B's, `error`, although its judge passed; run A lost the trial), and the gate took
the second trial on a graded session as a new join; neither left a dead letter."""

from __future__ import annotations

import base64
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.support import (
    free_ports,
    isolated_env,
    letter_key,
    produce,
    publish_scenarios,
    read_topic,
    settled,
    wait_for,
    workers,
)
from tests.unit.factories import conversation, scenario, session

pytestmark = pytest.mark.integration

PROCESSORS = ["gate", "judge", "verdict"]
JUDGES = [{"id": "said_goodbye", "kind": "regex", "pattern": "Goodbye", "must_match": True}]
JUDGES_2 = [{"id": "asked_fault", "kind": "regex", "pattern": "fault", "must_match": True}]


def dead_letters_counted(port: int) -> dict[tuple[str, str], float]:
    """passk_dead_letters_total on a worker's /metrics: (topic suffix, reason) -> count."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    return {
        (s.labels["topic"].rsplit(".", 2)[-2], s.labels["reason"]): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name == "passk_dead_letters_total"
    }


@contextmanager
def judged(settings: Settings, tmp_path: Path) -> Iterator[dict[str, int]]:
    """The gate, judge and verdict workers, joined; yields each one's /metrics port."""
    base = free_ports(len(PROCESSORS))
    port = {p: base + i for i, p in enumerate(PROCESSORS)}
    with workers(
        settings,
        PROCESSORS,
        isolated_env(settings, PASSK_JUDGE_WAIT_S="6"),
        tmp_path / "workers.log",
        extra={p: {"PASSK_METRICS_PORT": str(port[p])} for p in PROCESSORS},
    ):
        yield port


def test_a_reused_trial_id_and_a_shared_session_are_dead_letters_naming_both(
    settings: Settings, tmp_path: Path
) -> None:
    s1, s2 = scenario(id="S1", judges=JUDGES), scenario(id="S2", judges=JUDGES_2)
    publish_scenarios(settings, [s1, s2])
    with judged(settings, tmp_path) as port:
        # run A's trial, then run B's with the same trial id (its own session)
        a = conversation(
            "reused", event_id="cf-A", run_id="run-A", scenario_id="S1", session_id="sess-A"
        )
        b = conversation(
            "reused", event_id="cf-B", run_id="run-B", scenario_id="S2", session_id="sess-B"
        )
        # two trials of run C on one session: the first graded, then the second
        x = conversation("x", run_id="run-C", scenario_id="S1", session_id="sess-shared")
        y = conversation("y", run_id="run-C", scenario_id="S1", session_id="sess-shared")
        # both trials in flight at once, as the red team sent them
        produce(
            settings,
            Topic.CONVERSATION_FINISHED,
            [("sess-A", encode(a)), ("sess-B", encode(b)), ("sess-shared", encode(x))],
        )
        produce(
            settings,
            Topic.SESSION_PERSISTED,
            [
                ("sess-A", encode(session("A", session_id="sess-A"))),
                ("sess-B", encode(session("B", session_id="sess-B"))),
                ("sess-shared", encode(session("shared", session_id="sess-shared"))),
            ],
        )
        first = read_topic(settings, Topic.TRIAL_VERDICTS, min_count=2, timeout=90)
        produce(settings, Topic.CONVERSATION_FINISHED, [("sess-shared", encode(y))])
        # y's judge verdict still comes (the judge does not join): the verdict gives up on
        # its gates after the waits (5 s + 6 s) and says so
        read_topic(settings, Topic.TRIAL_VERDICTS, min_count=3, timeout=90)
        wait_for(lambda: settled(settings, PROCESSORS), timeout=120, what="inputs consumed")
        verdicts = read_topic(settings, Topic.TRIAL_VERDICTS)
        dead = read_topic(settings, Topic.DEAD_LETTERS)
        counted = {p: dead_letters_counted(port[p]) for p in ("gate", "verdict")}

    by_trial: dict[str, list[dict]] = {}
    for _, v, _ in verdicts:
        by_trial.setdefault(v["trial_id"], []).append(v)
    # The first trial whose result the verdict read is graded exactly as if the second
    # never came: one verdict, its own, passed (its judge passed, both gates passed).
    assert len(by_trial["reused"]) == 1, by_trial["reused"]
    winner = by_trial["reused"][0]
    assert (winner["outcome"], winner["failed_checks"]) == ("passed", [])
    first_run, first_sc = winner["run_id"], winner["scenario_id"]
    assert (first_run, first_sc) in {("run-A", "S1"), ("run-B", "S2")}
    second_run = "run-B" if first_run == "run-A" else "run-A"
    assert {(v["trial_id"], v["outcome"]) for _, v, _ in first} == {
        ("reused", "passed"),
        ("x", "passed"),
    }
    assert [(v["run_id"], v["outcome"]) for v in by_trial["x"]] == [("run-C", "passed")]
    assert [(v["outcome"], [c["check"] for c in v["failed_checks"]]) for v in by_trial["y"]] == [
        ("error", ["gate:exit", "gate:state"])
    ]

    letters = [(letter_key(d), d["processor"], d["reason"], d["detail"]) for _, d, _ in dead]
    conflicts = [x for x in letters if x[2] == "trial_id_conflict"]
    # run B's two gate results and its judge verdict, each refused by the verdict
    assert {(key, proc) for key, proc, _, _ in conflicts} == {("reused", "verdict")}
    assert len(conflicts) == 3
    for _, _, _, detail in conflicts:  # naming both: the second first, then the first
        assert detail.startswith(f"trial 'reused' of run '{second_run}'"), detail
        assert (
            f"reuses the id of trial 'reused' of run '{first_run}', scenario '{first_sc}'" in detail
        )
    sessions = [x for x in letters if x[2] == "session_conflict"]
    assert len(sessions) == 1
    key, proc, _, detail = sessions[0]
    assert (key, proc) == ("sess-shared", "gate")
    assert "'y'" in detail and "'x'" in detail and "'sess-shared'" in detail
    # one counter per reason (and source topic): the gate results and the judge verdict
    assert counted["verdict"] == {
        ("gate-results", "trial_id_conflict"): 2,
        ("judge-verdicts", "trial_id_conflict"): 1,
    }
    assert counted["gate"] == {("conversation-finished", "session_conflict"): 1}


def test_a_second_trials_session_never_grades_the_first(settings: Settings, tmp_path: Path) -> None:
    """The red team's exact order on one session S: CF(A), SP(B) naming trial B with an
    empty state, CF(B), then A's own SP. Before: A was graded on B's empty state and
    failed gate:state; SP(B) left no dead letter."""
    publish_scenarios(settings, [scenario(id="S1", judges=JUDGES)])
    with judged(settings, tmp_path):
        a = conversation("A", run_id="run-S", scenario_id="S1", session_id="S")
        b = conversation("B", run_id="run-S", scenario_id="S1", session_id="S")
        produce(settings, Topic.CONVERSATION_FINISHED, [("S", encode(a))])
        produce(
            settings,
            Topic.SESSION_PERSISTED,
            [("S", encode(session("B", session_id="S", trial_id="B", run_id="run-S", state={})))],
        )
        produce(settings, Topic.CONVERSATION_FINISHED, [("S", encode(b))])

        def conflicts() -> list[dict]:
            return [
                d
                for _, d, _ in read_topic(settings, Topic.DEAD_LETTERS, timeout=2)
                if d["reason"] == "session_conflict"
            ]

        # A's own session only once both of B's events were refused, as the red team sent it
        wait_for(lambda: len(conflicts()) >= 2, timeout=60, what="B's events refused")
        produce(
            settings,
            Topic.SESSION_PERSISTED,
            [("S", encode(session("A", session_id="S", trial_id="A", run_id="run-S")))],
        )
        wait_for(
            lambda: any(
                v["trial_id"] == "A"
                for _, v, _ in read_topic(settings, Topic.TRIAL_VERDICTS, timeout=2)
            ),
            timeout=90,
            what="A's verdict",
        )
        wait_for(lambda: settled(settings, PROCESSORS), timeout=120, what="inputs consumed")
        verdicts = read_topic(settings, Topic.TRIAL_VERDICTS)
        gates = [g for _, g, _ in read_topic(settings, Topic.GATE_RESULTS)]
        letters = conflicts()

    of_a = [v for _, v, _ in verdicts if v["trial_id"] == "A"]
    assert [(v["outcome"], v["failed_checks"]) for v in of_a] == [("passed", [])], of_a
    # graded on its own session, not on B's empty one; B never graded
    assert {(g["trial_id"], g["gate"], g["passed"]) for g in gates} == {
        ("A", "exit", True),
        ("A", "state", True),
    }
    assert len(letters) == 2, letters
    by_source = {d["source_topic"].rsplit(".", 2)[-2]: d for d in letters}
    assert set(by_source) == {"session-persisted", "conversation-finished"}
    for d in letters:
        assert d["processor"] == "gate"
        assert "'A'" in d["detail"] and "'B'" in d["detail"] and "'S'" in d["detail"], d
    held = by_source["session-persisted"]
    assert base64.b64decode(held["value_b64"]).decode().count('"trial_id":"B"') == 1
