"""External checks: results a harness or an existing evaluator already computed, carried on
ConversationFinished.checks, read against the scenario (docs/external-checks.md).

The scenario decides which of them gate: the ids it names in `external_checks`. A named
check the conversation did not report fails (the conversation is the only place its
result could come from, and it has arrived: nothing is left to wait for, so it is a
failed check, as a session that never came is a failed state gate, not an error). A
reported check the scenario does not name is recorded and shown, and never gates.
"""

from __future__ import annotations

from schemas.events import ConversationFinished, ExternalCheckResult
from schemas.scenario import Scenario

PREFIX = "external:"
# The metric label of every check the trial's scenario does not name: their ids come from
# events, not from scenario files, so they are folded into one value (cannot be an id:
# parentheses are outside the id pattern).
UNNAMED_LABEL = f"{PREFIX}(unnamed)"


def check_name(check_id: str) -> str:
    return f"{PREFIX}{check_id}"


def external_results(
    conversation: ConversationFinished, scenario: Scenario
) -> list[ExternalCheckResult]:
    """Every external check of the trial: the scenario's named ones first, in the
    scenario's order (reported or not), then the unnamed ones in the event's order."""
    reported = {c.id: c for c in conversation.checks}
    named = set(scenario.external_checks)
    results = []
    for check_id in scenario.external_checks:
        found = reported.get(check_id)
        if found is None:
            results.append(ExternalCheckResult(
                check=check_name(check_id), passed=False, gating=True, reported=False,
                reason=f"not reported: the scenario names external check {check_id!r} "
                "and the conversation's checks do not hold it",
            ))  # fmt: skip
        else:
            results.append(ExternalCheckResult(
                check=check_name(check_id), passed=found.passed, gating=True,
                reason=found.reason or ("passed" if found.passed else "failed (no reason given)"),
            ))  # fmt: skip
    for check in conversation.checks:
        if check.id not in named:
            results.append(ExternalCheckResult(
                check=check_name(check.id), passed=check.passed, gating=False,
                reason=check.reason or ("passed" if check.passed else "failed (no reason given)"),
            ))  # fmt: skip
    return results


def result_label(result: ExternalCheckResult) -> str:
    """passed | failed | missing (named, not reported)."""
    if not result.reported:
        return "missing"
    return "passed" if result.passed else "failed"


def metric_label(result: ExternalCheckResult) -> str:
    """The `check` label: a gating check's own name (bounded: ids come from scenario
    files), every advisory one folded into one value."""
    return result.check if result.gating else UNNAMED_LABEL
