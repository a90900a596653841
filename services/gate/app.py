"""Gate processor: joins conversation-finished and session-persisted by session_id, grades
both gates and publishes one GateResult per gate to gate-results (and a judge request to
judge-requests when the scenario's judges wait for the gates); a re-grade request is graded
apart from the join. The join is services/runtime/keyed_join.py; what is done with each
record, steps.py; the decisions, domain.py and gates.py."""

from __future__ import annotations

import faust
from prometheus_client import REGISTRY, CollectorRegistry

from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.gate import domain
from services.gate.metrics import GateMetrics
from services.gate.steps import Steps
from services.runtime.app import Delivery, make_app, raw_topic, run_alongside
from services.runtime.keyed_join import KeyedJoin
from services.runtime.metrics import common_metrics

PROCESSOR = "gate"
SPEC = PROCESSORS[PROCESSOR]  # its topics and tables


def build(settings: Settings, registry: CollectorRegistry = REGISTRY) -> faust.App:
    """(`registry`: where its own counters are registered; a second build in one
    process needs another.)"""
    app = make_app(PROCESSOR, settings)
    timing = domain.Timing.of(settings)
    # session_id -> the join while pending (RAM), then its graded marker (on disk)
    join = KeyedJoin(
        app,
        SPEC,
        settings,
        state=domain.JoinState,
        roles=("conversation", "session"),
        marked_at="graded_at",
        awaiting=domain.awaiting,
        due_at=lambda s: domain.due_at(s, timing),
        is_marker=domain.is_marker,
    )
    run_alongside(app, settings, join.catalog)
    steps = Steps(
        settings,
        timing,
        join,
        deliver=Delivery(PROCESSOR),
        gate_results=raw_topic(app, Topic.GATE_RESULTS, settings),
        judge_requests=raw_topic(app, Topic.JUDGE_REQUESTS, settings),
        session_topic=topic_name(Topic.SESSION_PERSISTED, settings),
        metrics=GateMetrics(registry),
        common=common_metrics(),
    )
    join.agent(
        "join",
        on_input={
            Topic.CONVERSATION_FINISHED: steps.on_conversation,
            Topic.SESSION_PERSISTED: steps.on_session,
        },
        on_tick=steps.on_tick,
        apart={Topic.REGRADE_REQUESTS: steps.regrade},
    )
    return app
