"""The verdict counts the external checks the scenario names, and records the others."""

from __future__ import annotations

import pytest

from schemas.events import ExternalCheckResult
from services.grading.calibration import CalibrationBook, GatingPolicy
from services.verdict import domain
from tests.unit.factories import gate_result, judge_verdict, scenario

SC = scenario(
    judges=[{"id": "covered_expected_topics", "assertion": "Asked."}], external_checks=["pii_scan"]
)
V = SC.version or ""
EVERY_JUDGE_GATES = {"policy": GatingPolicy(uncalibrated="gating"), "book": CalibrationBook()}


def ext(check: str, passed: bool, gating: bool, reported: bool = True) -> ExternalCheckResult:
    return ExternalCheckResult(
        check=f"external:{check}",
        passed=passed,
        gating=gating,
        reported=reported,
        reason=f"{check} {'ok' if passed else 'broke'}",
    )


def verdict_for(externals, *, exit_ok=True, judge="passed", missing=()):
    state = domain.on_gate_result(
        None, gate_result("exit", exit_ok, version=V, external_checks=externals), now=0
    )
    state = domain.on_gate_result(state, gate_result("state", True, version=V), now=0)
    if judge is not None:
        state = domain.on_judge_verdict(
            state, judge_verdict("covered_expected_topics", judge, version=V), now=0
        )
    return domain.assemble(state, SC, missing=list(missing), waited_s=5, **EVERY_JUDGE_GATES)


# externals, exit gate, judge result, missing -> outcome, failed checks, passed checks, advisory
CASES = {
    "a gating check that passed": (
        [ext("pii_scan", True, True)],
        True,
        "passed",
        (),
        "passed",
        [],
        ["gate:exit", "gate:state", "external:pii_scan", "judge:covered_expected_topics"],
        [],
    ),
    "only a gating check failed: the trial fails": (
        [ext("pii_scan", False, True)],
        True,
        "passed",
        (),
        "failed",
        ["external:pii_scan"],
        ["gate:exit", "gate:state", "judge:covered_expected_topics"],
        [],
    ),
    "a named check never reported fails, it is not an error": (
        [ext("pii_scan", False, True, reported=False)],
        True,
        "passed",
        (),
        "failed",
        ["external:pii_scan"],
        ["gate:exit", "gate:state", "judge:covered_expected_topics"],
        [],
    ),
    "an advisory check failing changes nothing": (
        [ext("pii_scan", True, True), ext("tone", False, False)],
        True,
        "passed",
        (),
        "passed",
        [],
        ["gate:exit", "gate:state", "external:pii_scan", "judge:covered_expected_topics"],
        ["external:tone"],
    ),
    "an advisory check passing is recorded too": (
        [ext("pii_scan", True, True), ext("tone", True, False)],
        True,
        "passed",
        (),
        "passed",
        [],
        ["gate:exit", "gate:state", "external:pii_scan", "judge:covered_expected_topics"],
        ["external:tone"],
    ),
    "listed after the gates, before the judges": (
        [ext("pii_scan", False, True)],
        False,
        "failed",
        (),
        "failed",
        ["gate:exit", "external:pii_scan", "judge:covered_expected_topics"],
        ["gate:state"],
        [],
    ),
    "a failed external check outranks a judge error": (
        [ext("pii_scan", False, True)],
        True,
        None,
        ("judge:covered_expected_topics",),
        "failed",
        ["external:pii_scan", "judge:covered_expected_topics"],
        ["gate:exit", "gate:state"],
        [],
    ),
    "a gate result from before external checks: the named one is an error, not a pass": (
        [],
        True,
        "passed",
        (),
        "error",
        ["external:pii_scan"],
        ["gate:exit", "gate:state", "judge:covered_expected_topics"],
        [],
    ),
}


@pytest.mark.parametrize(
    ("externals", "exit_ok", "judge", "missing", "outcome", "failed", "passed", "advisory"),
    CASES.values(),
    ids=CASES.keys(),
)
def test_external_checks_in_the_verdict(
    externals, exit_ok, judge, missing, outcome, failed, passed, advisory
) -> None:
    verdict = verdict_for(externals, exit_ok=exit_ok, judge=judge, missing=missing)
    assert verdict.outcome == outcome
    assert [c.check for c in verdict.failed_checks] == failed
    assert verdict.checks_passed == passed
    assert [c.check for c in verdict.advisory_checks] == advisory


def test_the_failed_check_keeps_the_evaluators_reason() -> None:
    verdict = verdict_for([ext("pii_scan", False, True)])
    assert verdict.failed_checks[0].reason == "pii_scan broke"


def test_a_scenario_naming_no_checks_is_assembled_as_before() -> None:
    bare = scenario(judges=[])
    version = bare.version or ""
    state = domain.on_gate_result(None, gate_result("exit", True, version=version), now=0)
    state = domain.on_gate_result(state, gate_result("state", True, version=version), now=0)
    verdict = domain.assemble(state, bare, missing=[], waited_s=0, **EVERY_JUDGE_GATES)
    assert (verdict.outcome, verdict.checks_passed, verdict.advisory_checks) == (
        "passed",
        ["gate:exit", "gate:state"],
        [],
    )
