"""The keyed join's pure parts: which input a pending state waits for, and what it refuses
to be built for. (Its agent runs against the real broker: tests/integration/
test_gate_verdict.py, test_trial_identity.py, test_join_flow.py, tests/e2e.)"""

from __future__ import annotations

from typing import Any

import pytest

from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.gate import domain as gate_domain
from services.runtime.keyed_join import KeyedJoin, input_waited_for
from services.verdict import domain as verdict_domain
from tests.unit.factories import conversation, gate_result, session

ROLES = {"conversation": "p.conversation-finished", "session": "p.session-persisted"}


def test_a_pending_state_waits_for_the_input_its_domain_names() -> None:
    waits_on = input_waited_for(ROLES, gate_domain.awaiting)
    only_conversation = gate_domain.JoinState(
        session_id="s1", conversation=conversation(), conversation_seen_at=1.0
    )
    only_session = gate_domain.JoinState(session_id="s1", session=session(), session_seen_at=1.0)
    assert waits_on(only_conversation) == "p.session-persisted"
    assert waits_on(only_session) == "p.conversation-finished"


def test_a_graded_or_empty_state_waits_for_nothing() -> None:
    waits_on = input_waited_for(ROLES, gate_domain.awaiting)
    graded = gate_domain.JoinState(session_id="s1", graded_at=5.0, graded_trial_ids=["t1"])
    assert waits_on(graded) is None
    assert waits_on(gate_domain.JoinState(session_id="s1")) is None


def test_the_verdicts_roles_map_its_two_inputs() -> None:
    roles = {"gate": "p.gate-results", "judge": "p.judge-verdicts"}
    waits_on = input_waited_for(roles, verdict_domain.awaiting)
    one_gate = verdict_domain.on_gate_result(None, gate_result("exit"), 1.0)
    assert waits_on(one_gate) == "p.gate-results"  # the state gate is still missing
    both = verdict_domain.on_gate_result(one_gate, gate_result("state"), 2.0)
    assert waits_on(both) == "p.judge-verdicts"


@pytest.mark.parametrize("name", ["judge", "aggregate", "sink"])
def test_a_processor_that_is_no_two_input_join_is_refused(name: str) -> None:
    app: Any = object()  # refused before the app is touched
    with pytest.raises(ValueError, match="a keyed join needs"):
        KeyedJoin(
            app,
            PROCESSORS[name],
            Settings(),
            state=gate_domain.JoinState,
            roles=("a", "b"),
            marked_at="graded_at",
            awaiting=gate_domain.awaiting,
            due_at=lambda s: None,
            is_marker=gate_domain.is_marker,
        )
