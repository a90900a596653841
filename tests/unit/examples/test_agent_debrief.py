"""The reference product's dialogue (examples/agent/debrief.py), alone."""

from __future__ import annotations

import pytest

from examples.agent.debrief import Debrief, faults_for, parse_plan, respond
from services.grading.scenario_loader import load_scenarios
from tests.support import ROOT

SCENARIOS = {s.id: s for s in load_scenarios(ROOT / "examples" / "scenarios").scenarios}


def talk(scenario_id: str, faults: list[str] | None = None) -> tuple[Debrief, list]:
    script = SCENARIOS[scenario_id].user.script  # type: ignore[union-attr]
    debrief, turns = Debrief(faults=faults or []), []
    for line in script:
        turns.append(respond(debrief, line))
        if turns[-1].exit_reason:
            break
    return debrief, turns


def test_the_billable_script_files_its_debrief_and_closes() -> None:
    debrief, turns = talk("debrief-billable-repair")
    assert turns[-1].exit_reason == "product_closed" and turns[-1].file
    state = debrief.to_state()
    assert state["billability"] == [{"code": "LAB-2H", "qty": 1}, {"code": "PART-PUMP", "qty": 1}]
    assert "replaced" in state["report"]["summary"] and "follow_up" not in state


def test_a_return_visit_is_handed_off() -> None:
    debrief, turns = talk("debrief-follow-up-required")
    assert turns[-1].exit_reason == "handed_off"
    assert debrief.to_state()["follow_up"]["parts_on_order"] == [
        {"code": "PART-COMPRESSOR", "qty": 1}
    ]


def test_a_quick_question_is_answered_and_closed_with_nothing_filed() -> None:
    _, turns = talk("debrief-quick-question")
    assert len(turns) == 1 and turns[0].exit_reason == "product_closed" and not turns[0].file


def test_each_fault_does_its_harm() -> None:
    lost, _ = talk("debrief-billable-repair", ["lost_field"])
    assert "billability" not in lost.to_state()
    _, silent = talk("debrief-billable-repair", ["silent_close"])
    assert silent[-1].exit_reason is None and silent[-1].file and "filed" in silent[-1].reply
    _, repeat = talk("debrief-billable-repair", ["repeated_question"])
    assert sum("what was the fault" in t.reply.lower() for t in repeat) == 2
    assert repeat[-1].exit_reason == "product_closed"


def test_the_fault_plan_is_per_scenario_and_trial_number() -> None:
    plan = parse_plan({"a": {"lost_field": [2, 4], "silent_close": "*"}})
    assert faults_for(plan, "a", 2) == ["lost_field", "silent_close"]
    assert faults_for(plan, "a", 3) == ["silent_close"]
    assert faults_for(plan, "b", 2) == [] and faults_for(plan, None, None) == []
    with pytest.raises(ValueError, match="unknown fault"):
        parse_plan({"a": {"explode": [1]}})
