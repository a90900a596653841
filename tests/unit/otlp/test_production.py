"""Production traces (no passk ids) to trials by the scenarios' match rules."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.scenario import Scenario
from services.otlp.mapping import Skipped, Taken, assemble, by_trace, spans_of
from tests.unit.otlp.spans import PASSK, T0, agent_trace, plain_trace, request


def _scenario(sid: str, match: dict, **extra) -> Scenario:  # type: ignore[no-untyped-def]
    return Scenario.model_validate(
        {
            "id": sid,
            "expected_exit": "resolved",
            "match": match,
            "completion": "conversation",
            **extra,
        }
    ).versioned()


SUPPORT = _scenario("support", {"service.name": "support-agent"})
REFUNDS = _scenario(
    "refunds",
    {"service.name": "support-agent", "app.intent": ["refund", "return"]},
    exit_attribute="app.exit_reason",
    sampling={"llm_judges": 0.1},
)
OTHER = _scenario("other", {"service.name": "billing"}, production_run="prod-{date}-billing")
ALL = [SUPPORT, REFUNDS, OTHER]


def _one(spans, resource=None, scenarios=ALL):  # type: ignore[no-untyped-def]
    traces = by_trace(spans_of(request(*spans, resource=resource)))
    return assemble(next(iter(traces.values())), scenarios)


def test_a_plain_trace_is_a_trial_of_the_matching_scenario() -> None:
    taken = _one(plain_trace(7, {"session.id": "s-9"}), resource={"service.name": "support-agent"})
    assert isinstance(taken, Taken)
    cf = taken.conversation
    day = datetime.fromtimestamp(T0 / 1e9, UTC).date().isoformat()
    assert (cf.scenario_id, cf.trial_id, cf.session_id, cf.run_id) == (
        "support",
        f"{7:032x}",
        "s-9",
        f"production-{day}",
    )
    assert cf.production is True
    assert cf.exit_reason == "unknown"  # never skipped for lacking passk's attributes


def test_most_keys_win_and_the_span_attribute_beats_the_resource() -> None:
    taken = _one(
        plain_trace(8, {"app.intent": "refund", "app.exit_reason": "resolved"}),
        resource={"service.name": "support-agent", "app.intent": "other"},
    )
    assert isinstance(taken, Taken)
    assert taken.conversation.scenario_id == "refunds"
    assert taken.conversation.exit_reason == "resolved"  # from exit_attribute
    assert taken.conversation.session_id == f"{8:032x}"  # no session attribute: the trace id
    taken = _one(
        plain_trace(8, {"app.intent": "other"}),
        resource={"service.name": "support-agent", "app.intent": "refund"},
    )
    assert isinstance(taken, Taken) and taken.conversation.scenario_id == "support"


def test_ties_go_to_the_smallest_id_and_the_run_template_is_used() -> None:
    twin = _scenario("aaa", {"service.name": "billing"})
    taken = _one(plain_trace(9), resource={"service.name": "billing"}, scenarios=[OTHER, twin])
    assert isinstance(taken, Taken) and taken.conversation.scenario_id == "aaa"
    taken = _one(plain_trace(9), resource={"service.name": "billing"})
    assert isinstance(taken, Taken) and taken.conversation.run_id.startswith("prod-")
    assert taken.conversation.run_id.endswith("-billing")


def test_no_match_is_skipped_with_its_reason() -> None:
    skipped = _one(plain_trace(10), resource={"service.name": "nobody"})
    assert isinstance(skipped, Skipped) and skipped.reason == "no_matching_scenario"
    # Without rules (no catalog handed over) a plain trace stays what it was.
    skipped = _one(plain_trace(10), resource={"service.name": "support-agent"}, scenarios=None)
    assert isinstance(skipped, Skipped) and skipped.reason == "no_passk_ids"


def test_a_trace_with_passk_ids_is_unchanged_by_rules() -> None:
    taken = _one(agent_trace(11), resource={"service.name": "support-agent"})
    assert isinstance(taken, Taken)
    cf = taken.conversation
    assert (cf.run_id, cf.scenario_id, cf.trial_id) == (
        PASSK["passk.run_id"],
        PASSK["passk.scenario_id"],
        PASSK["passk.trial_id"],
    )
    assert cf.production is False
