"""The secured broker's ACL plan follows the processor registry: each processor may read
its inputs, read-backs, ticks and changelogs, and write its outputs, ticks and changelogs;
the sets are the ones the brokers have always been given."""

from __future__ import annotations

from infra.kafka.secure import principal_acls, users
from services.contract.processors import PROCESSORS, TOPIC_SPECS


def test_the_gate_reads_and_writes_what_it_always_did() -> None:
    gate = principal_acls("p.")["passk-gate"]
    assert set(gate["read"]) == {
        "p.conversation-finished.v1",
        "p.session-persisted.v1",
        "p.regrade-requests.v1",
        "p.scenarios.v1",
        "p.gate-ticks.v1",
        "p.gate-gate-joins-changelog",
        "p.gate-gate-graded-changelog",
    }
    assert set(gate["write"]) == {
        "p.gate-results.v1",
        "p.judge-requests.v1",
        "p.dead-letters.v1",
        "p.gate-ticks.v1",
        "p.gate-gate-joins-changelog",
        "p.gate-gate-graded-changelog",
    }
    assert gate["groups"] == ["p.gate"] and gate["prefixes"] == ["p.gate-"]


def test_the_verdict_reads_the_calibrations_it_gates_on() -> None:
    verdict = principal_acls("p.")["passk-verdict"]
    assert "p.judge-calibrations.v1" in verdict["read"]
    assert "p.judge-calibrations.v1" not in verdict["write"]
    assert set(principal_acls("p.")["passk-sink"]["write"]) == {"p.dead-letters.v1"}


def test_every_processor_has_its_user_and_the_cli_reads_every_topic() -> None:
    plan = principal_acls("")
    assert {f"passk-{p}" for p in PROCESSORS} <= set(users()) & set(plan)
    assert set(plan["passk-cli"]["read"]) == {s.topic.value for s in TOPIC_SPECS}
    assert "calibration-calibration-matrices-changelog" in plan["passk-cli"]["read"]
    assert plan["passk-cli"]["groups"] == list(PROCESSORS)
