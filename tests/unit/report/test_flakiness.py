"""Flakiness explained: the checks that flip between a scenario's trials, ranked."""

from __future__ import annotations

import pytest

from schemas.events import FailedCheck
from services.report.flakiness import TrialChecks, explain_flakiness, explain_scenario


def trial(scenario: str, outcome: str, *checks: str) -> TrialChecks:
    return TrialChecks(
        scenario_id=scenario,
        outcome=outcome,
        failed_checks=[FailedCheck(check=c, reason=f"{c} broke") for c in checks],
    )


def test_the_issue_example_reads_as_written() -> None:
    trials = [
        trial("s", "failed", "judge:x"),
        trial("s", "failed", "judge:x", "gate:exit"),
        trial("s", "passed"),
        trial("s", "passed"),
        trial("s", "passed"),
    ]
    found = explain_scenario("s", trials)
    assert found is not None
    assert found.summary == "judge:x fails 2 of 5, gate:exit 1 of 5"
    assert (found.trials, found.passed) == (5, 3)


@pytest.mark.parametrize(
    ("outcomes", "flaky"),
    [
        (["passed", "passed", "passed"], False),  # all alike: reliable
        (["failed", "failed", "failed"], False),  # all alike: a steady failure
        (["passed", "failed", "passed"], True),
        (["failed", "error", "failed"], True),  # disagree without any pass
    ],
)
def test_only_scenarios_whose_trials_disagree_are_flaky(outcomes: list[str], flaky: bool) -> None:
    trials = [trial("s", o, *([] if o == "passed" else [f"gate:{o}"])) for o in outcomes]
    assert (explain_scenario("s", trials) is not None) is flaky


def test_a_check_failing_in_every_trial_does_not_flip() -> None:
    trials = [
        trial("s", "failed", "gate:state", "judge:a"),
        trial("s", "failed", "gate:state"),
        trial("s", "error", "gate:state", "judge:b"),
    ]
    found = explain_scenario("s", trials)
    assert found is not None
    assert [(c.check, c.failures) for c in found.checks] == [("judge:a", 1), ("judge:b", 1)]


def test_ranked_by_failures_then_name_and_a_repeat_counts_once() -> None:
    trials = [
        trial("s", "failed", "judge:b", "judge:b"),
        trial("s", "failed", "judge:a", "judge:b"),
        trial("s", "failed", "judge:c"),
        trial("s", "passed"),
    ]
    found = explain_scenario("s", trials)
    assert found is not None
    assert [c.summary for c in found.checks] == [
        "judge:b fails 2 of 4",
        "judge:a fails 1 of 4",
        "judge:c fails 1 of 4",
    ]
    assert found.checks[0].example_reason == "judge:b broke"


def test_every_flaky_scenario_in_order_and_none_else() -> None:
    trials = [
        trial("b", "passed"),
        trial("b", "failed", "gate:exit"),
        trial("a", "passed"),
        trial("a", "passed"),
        trial("c", "error", "judge:x"),
        trial("c", "passed"),
    ]
    assert [f.scenario_id for f in explain_flakiness(trials)] == ["b", "c"]
