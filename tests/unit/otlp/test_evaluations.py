"""Verdicts to gen_ai.evaluation.result records, encoded by the official OTLP encoder."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs

from schemas.events import FailedCheck, GateResult, JudgeVerdict, TrialVerdict
from services.otlp.evaluations import TraceRef, evaluation_of
from services.otlp.export import to_log_records

REF = {
    "trial_id": "t-1",
    "run_id": "r",
    "scenario_id": "s",
    "scenario_version": "v1",
    "session_id": "x",
}


def test_each_result_is_one_evaluation_event_carrying_the_trace() -> None:
    trace = TraceRef("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    events = [
        JudgeVerdict(
            event_id="j",
            judge_id="covered",
            judge_kind="llm",
            result="failed",
            reason="missed parts",
            **REF,
        ),
        GateResult(event_id="g", gate="state", passed=True, **REF),
        TrialVerdict(
            event_id="v",
            k=3,
            outcome="failed",
            **REF,
            failed_checks=[FailedCheck(check="judge:covered", reason="missed parts")],
        ),
    ]
    evaluations = [evaluation_of(e, trace) for e in events]
    names = [e.attributes["gen_ai.evaluation.name"] for e in evaluations]
    assert names == ["judge:covered", "gate:state", "passk.trial"]
    assert [e.attributes["gen_ai.evaluation.score.label"] for e in evaluations] == [
        "fail",
        "pass",
        "fail",
    ]
    assert evaluations[2].attributes["gen_ai.evaluation.explanation"] == (
        "judge:covered: missed parts"
    )
    request = encode_logs(to_log_records(evaluations))
    logs = request.resource_logs[0].scope_logs[0].log_records
    assert len(logs) == 3
    assert {r.event_name for r in logs} == {"gen_ai.evaluation.result"}
    assert {r.trace_id.hex() for r in logs} == {trace.trace_id}
    assert {r.span_id.hex() for r in logs} == {trace.span_id}


def test_a_trial_not_from_a_trace_has_no_trace_ids() -> None:
    e = evaluation_of(
        GateResult(event_id="g", gate="exit", passed=False, reasons=["exit was max_turns"], **REF),
        None,
    )
    [record] = encode_logs(to_log_records([e])).resource_logs[0].scope_logs[0].log_records
    assert record.trace_id == b"" or set(record.trace_id) == {0}
    assert e.attributes["gen_ai.evaluation.explanation"] == "exit was max_turns"
