"""Flow control through the real broker: a backlog whose sessions are all ahead of their
conversations, with a pending bound far below it, is joined to the end, each trial once,
none lost; sessions that never get a conversation do not stall it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.support import isolated_env, produce, publish_scenarios, read_topic, running, wait_for
from tests.unit.factories import conversation, scenario, session

pytestmark = pytest.mark.integration


def test_a_backlog_far_above_the_pending_bound_is_joined_to_the_end(
    settings: Settings, tmp_path: Path
) -> None:
    publish_scenarios(settings, [scenario(judges=[])])  # gates only: no judge needed
    trials = [f"flow-{i}" for i in range(1600)]
    orphans = [f"orphan-{i}" for i in range(200)]  # their conversation never comes
    # The whole backlog is written before the workers start, every session ahead of every
    # conversation: read in log order, each partition's pending set fills with trials
    # waiting for conversations (about 200 a partition, the bound 4: more than the gate
    # reads between two of the flow control's checks, 0.5 s apart), then the reverse.
    produce(
        settings,
        Topic.SESSION_PERSISTED,
        [(f"s-{t}", encode(session(t))) for t in orphans + trials],
    )
    produce(
        settings, Topic.CONVERSATION_FINISHED, [(f"s-{t}", encode(conversation(t))) for t in trials]
    )
    env = isolated_env(settings, PASSK_JOIN_MAX_PENDING="4", PASSK_LOG_LEVEL="info")
    log = tmp_path / "workers.log"
    with running(["worker", "gate"], env, log), running(["worker", "verdict"], env, log):
        verdicts = read_topic(settings, Topic.TRIAL_VERDICTS, min_count=len(trials), timeout=240)
        # the join still follows live traffic with the orphans pending (nothing paused
        # for good): a trial sent now is joined with its session, not graded without it
        late = "flow-late"
        produce(settings, Topic.CONVERSATION_FINISHED, [(f"s-{late}", encode(conversation(late)))])
        produce(settings, Topic.SESSION_PERSISTED, [(f"s-{late}", encode(session(late)))])

        def with_late() -> list | None:
            got = read_topic(settings, Topic.TRIAL_VERDICTS, timeout=5)
            return got if any(value["trial_id"] == late for _, value, _ in got) else None

        verdicts = wait_for(with_late, timeout=120, what="the live trial's verdict")
    assert "join flow: " in log.read_text(), "the bound never paused an input"
    counts = Counter(value["trial_id"] for _, value, _ in verdicts)
    assert set(counts) == {*trials, late}
    assert set(counts.values()) == {1}, "a trial was counted twice"
    assert {value["outcome"] for _, value, _ in verdicts} == {"passed"}, (
        "a trial was graded without its session"
    )
