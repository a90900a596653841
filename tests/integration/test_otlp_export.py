"""The evaluation exporter against the real broker: results become gen_ai.evaluation.result
events with the trace ids of the conversation they graded, through an endpoint outage."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry

from schemas.events import ConversationFinished, GateResult, JudgeVerdict, Message, TrialVerdict
from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.otlp.export import run_exporter
from services.otlp.metrics import OtlpMetrics
from services.otlp.settings import OtlpSettings
from tests.otlp_sink import log_sink
from tests.support import free_ports, produce

pytestmark = pytest.mark.integration
TRACE, SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


def _ref(trial: str) -> dict[str, str]:
    return {
        "trial_id": trial,
        "run_id": "r",
        "scenario_id": "s",
        "scenario_version": "v",
        "session_id": f"sess-{trial}",
    }


async def test_results_go_out_with_their_trace_ids_through_an_outage(settings: Settings) -> None:
    traced = ConversationFinished(
        event_id="c1",
        run_id="r",
        scenario_id="s",
        trial_id="t-traced",
        session_id="sess-1",
        exit_reason="product_closed",
        transcript=[Message(role="user", content="hi")],
        otel_trace_id=TRACE,
        otel_span_id=SPAN,
    )
    plain = traced.model_copy(update={"event_id": "c2", "trial_id": "t-plain"})
    plain.__pydantic_extra__ = {}
    produce(
        settings,
        Topic.CONVERSATION_FINISHED,
        [("sess-1", encode(traced)), ("sess-2", encode(plain))],
    )
    produce(
        settings,
        Topic.GATE_RESULTS,
        [
            (
                "t-traced",
                encode(
                    GateResult(
                        event_id="g1",
                        gate="exit",
                        passed=False,
                        reasons=["exit was handed_off"],
                        **_ref("t-traced"),
                    )
                ),
            )
        ],
    )
    produce(
        settings,
        Topic.JUDGE_VERDICTS,
        [
            (
                "t-traced",
                encode(
                    JudgeVerdict(
                        event_id="j1",
                        judge_id="polite",
                        judge_kind="llm",
                        result="passed",
                        reason="ok",
                        **_ref("t-traced"),
                    )
                ),
            )
        ],
    )
    produce(
        settings,
        Topic.TRIAL_VERDICTS,
        [
            (
                "t-traced",
                encode(TrialVerdict(event_id="v1", k=3, outcome="failed", **_ref("t-traced"))),
            ),
            (
                "t-plain",
                encode(TrialVerdict(event_id="v2", k=3, outcome="passed", **_ref("t-plain"))),
            ),
        ],
    )
    port = free_ports(1)
    metrics = OtlpMetrics(CollectorRegistry())
    with log_sink(port, fail_first=2) as sink:
        otlp = OtlpSettings(
            PASSK_OTLP_EXPORT_ENDPOINT=f"http://127.0.0.1:{port}", PASSK_OTLP_EXPORT_TIMEOUT_S=1
        )
        stop = asyncio.Event()
        task = asyncio.create_task(run_exporter(settings, otlp, metrics, stop))
        deadline = time.monotonic() + 90
        while len(sink.snapshot()) < 4 and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.wait_for(task, 30)
    records = {r["attributes"]["passk.event_id"]: r for r in sink.snapshot()}
    assert set(records) == {"g1", "j1", "v1", "v2"}
    for event_id in ("g1", "j1", "v1"):
        assert (records[event_id]["trace_id"], records[event_id]["span_id"]) == (TRACE, SPAN)
    assert set(records["v2"]["trace_id"]) <= {"0"}
    assert records["g1"]["attributes"]["gen_ai.evaluation.score.label"] == "fail"
    assert records["g1"]["attributes"]["gen_ai.evaluation.explanation"] == "exit was handed_off"
    assert records["v2"]["attributes"]["gen_ai.evaluation.score.label"] == "pass"
    assert sink.refused == 2
    assert metrics.export_failures._value.get() >= 1
