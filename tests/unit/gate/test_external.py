"""External checks read against the scenario: which gate, which are advisory, which are
missing, and how they are labelled in metrics."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from schemas.events import ExternalCheck, RegradeRequest
from services.gate.external import UNNAMED_LABEL, external_results, metric_label
from services.gate.gates import exit_gate, gates_for, regrade_gates
from services.gate.metrics import GateMetrics
from tests.unit.factories import conversation, scenario, session


def reported(*checks: tuple[str, bool, str]) -> list[ExternalCheck]:
    return [ExternalCheck(id=i, passed=p, reason=r) for i, p, r in checks]


# (scenario's external_checks, the conversation's checks,
#  expected [(check, passed, gating, reported, reason or None to skip)])
CASES = {
    "none anywhere": ([], [], []),
    "named and passed": (
        ["pii_scan"],
        [("pii_scan", True, "no PII found")],
        [("external:pii_scan", True, True, True, "no PII found")],
    ),
    "named and failed": (
        ["pii_scan"],
        [("pii_scan", False, "card number in turn 3")],
        [("external:pii_scan", False, True, True, "card number in turn 3")],
    ),
    "named, not reported": (
        ["pii_scan"],
        [],
        [("external:pii_scan", False, True, False, None)],
    ),
    "reported, not named: advisory": (
        [],
        [("tone", False, "curt")],
        [("external:tone", False, False, True, "curt")],
    ),
    "named first in the scenario's order, then unnamed in the event's": (
        ["b", "a"],
        [("z", True, ""), ("a", True, "ok"), ("y", False, "no"), ("b", False, "")],
        [
            ("external:b", False, True, True, "failed (no reason given)"),
            ("external:a", True, True, True, "ok"),
            ("external:z", True, False, True, "passed"),
            ("external:y", False, False, True, "no"),
        ],
    ),
}


@pytest.mark.parametrize(("named", "checks", "expected"), CASES.values(), ids=CASES.keys())
def test_external_results(named, checks, expected) -> None:
    results = external_results(
        conversation(checks=reported(*checks)), scenario(external_checks=named)
    )
    assert [(r.check, r.passed, r.gating, r.reported) for r in results] == [e[:4] for e in expected]
    for r, e in zip(results, expected, strict=True):
        if e[4] is not None:
            assert r.reason == e[4]


def test_a_missing_check_says_what_is_missing() -> None:
    [result] = external_results(conversation(), scenario(external_checks=["pii_scan"]))
    assert "not reported" in result.reason and "'pii_scan'" in result.reason


def test_external_checks_ride_on_the_exit_gate_and_never_change_it() -> None:
    sc = scenario(external_checks=["pii_scan"])
    conv = conversation(checks=reported(("pii_scan", False, "leak"), ("tone", False, "curt")))
    exit_result = exit_gate(conv, sc, session())
    assert exit_result.passed, "the exit gate is about the exit"
    assert [c.check for c in exit_result.external_checks] == ["external:pii_scan", "external:tone"]
    state_result = gates_for(conv, session(), sc, waited_s=1)[1]
    assert state_result.gate == "state" and state_result.external_checks == []


def test_conversation_completion_keeps_its_external_checks() -> None:
    sc = scenario(completion="conversation", outcome=[], external_checks=["pii_scan"])
    [only] = gates_for(conversation(), None, sc, waited_s=0)
    assert only.gate == "exit" and not only.external_checks[0].reported


def test_a_regrade_reads_the_checks_against_the_scenario_it_is_graded_against() -> None:
    conv = conversation(checks=reported(("pii_scan", False, "leak")))
    request = RegradeRequest(
        event_id="rg",
        trial_id=conv.trial_id,
        run_id=conv.run_id,
        scenario_id=conv.scenario_id,
        scenario_version="v2",
        session_id=conv.session_id,
        attempt=2,
        conversation=conv,
        session=session(),
    )
    before = exit_gate(conv, scenario(), session()).external_checks
    after = regrade_gates(request, scenario(external_checks=["pii_scan"]), session_wait_s=1)
    assert [c.gating for c in before] == [False]
    assert after[0].attempt == 2 and [c.gating for c in after[0].external_checks] == [True]


def test_metric_labels_are_bounded_by_the_scenario() -> None:
    registry = CollectorRegistry()
    metrics = GateMetrics(registry)
    sc = scenario(external_checks=["pii_scan", "tool_budget"])
    for i in range(50):  # fifty ids no scenario names: one label value between them
        conv = conversation(
            f"t{i}", checks=reported(("pii_scan", i % 2 == 0, ""), (f"random-{i}", False, ""))
        )
        metrics.count(exit_gate(conv, sc, session(f"t{i}")))
    samples = {
        (s.labels["check"], s.labels["result"]): s.value
        for m in registry.collect()
        if m.name == "passk_external_checks"
        for s in m.samples
        if s.name == "passk_external_checks_total"
    }
    assert samples == {
        ("external:pii_scan", "passed"): 25,
        ("external:pii_scan", "failed"): 25,
        ("external:tool_budget", "missing"): 50,
        (UNNAMED_LABEL, "failed"): 50,
    }
    gates = [
        s
        for m in registry.collect()
        if m.name == "passk_gate_results"
        for s in m.samples
        if s.name == "passk_gate_results_total"
    ]
    assert sum(s.value for s in gates) == 50


def test_the_unnamed_label_cannot_be_an_id() -> None:
    with pytest.raises(ValueError):
        ExternalCheck(id=UNNAMED_LABEL.removeprefix("external:"), passed=True)
    [advisory] = external_results(conversation(checks=reported(("x", True, ""))), scenario())
    assert metric_label(advisory) == UNNAMED_LABEL
