"""External checks a python or http agent returns turn by turn: one result per id on the
event (which refuses repeats), AND across turns, bounded."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas.events import ExternalCheck
from services.harness.domain import (
    Conversation,
    FinishedTrial,
    PlannedTrial,
    conversation_event,
    fold_checks,
    parse_reply,
)
from tests.unit.factories import scenario


def c(check_id: str, passed: bool, reason: str = "") -> ExternalCheck:
    return ExternalCheck(id=check_id, passed=passed, reason=reason)


CASES = {
    "new ids are appended in order": (
        [c("a", True)],
        [c("b", False, "x")],
        [("a", True, ""), ("b", False, "x")],
    ),
    "a later failure replaces a pass": (
        [c("a", True, "ok")],
        [c("a", False, "leak")],
        [("a", False, "leak")],
    ),
    "a later pass does not undo a failure": (
        [c("a", False, "leak")],
        [c("a", True, "ok")],
        [("a", False, "leak")],
    ),
    "the first failure's reason is kept": (
        [c("a", False, "first")],
        [c("a", False, "second")],
        [("a", False, "first")],
    ),
    "repeats within one reply fold too": (
        [],
        [c("a", True), c("a", False, "no"), c("a", True)],
        [("a", False, "no")],
    ),
}


@pytest.mark.parametrize(("held", "new", "expected"), CASES.values(), ids=CASES.keys())
def test_fold_checks(held, new, expected) -> None:
    assert [(x.id, x.passed, x.reason) for x in fold_checks(held, new)] == expected


def test_ids_past_the_bound_are_left_out_and_known_ones_still_fold() -> None:
    held = [c(f"c{i}", True) for i in range(3)]
    folded = fold_checks(held, [c("new", False), c("c1", False, "late")], limit=3)
    assert [(x.id, x.passed) for x in folded] == [("c0", True), ("c1", False), ("c2", True)]


def test_an_agent_repeating_a_check_every_turn_still_gives_a_valid_event() -> None:
    conv = Conversation()
    for i, passed in enumerate([True, False, True]):
        conv.said_by_user(f"turn {i}")
        conv.replied(
            parse_reply(
                {
                    "reply": "ok",
                    "session_id": "S1",
                    "checks": [{"id": "pii_scan", "passed": passed, "reason": f"turn {i}"}],
                }
            ),
            1.0,
        )
    finished = FinishedTrial(
        planned=PlannedTrial(scenario(), 1, "run:s:001"),
        run_id="run",
        agent_version=None,
        exit_reason="product_closed",
        conversation=conv,
        duration_ms=1.0,
        finished_at=datetime(2026, 1, 1, tzinfo=UTC),
        harness_error=None,
    )
    event = conversation_event(finished)
    assert [(x.id, x.passed, x.reason) for x in event.checks] == [("pii_scan", False, "turn 1")]
