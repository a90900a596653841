"""The evaluation exporter: its own consumer group (`<prefix>otlp`) reads judge verdicts,
gate results and trial verdicts and sends each as a `gen_ai.evaluation.result` event
through the official OTLP/HTTP log exporter to PASSK_OTLP_EXPORT_ENDPOINT.

Trace ids: a trial that came from a trace has `otel_trace_id` / `otel_span_id` on its
ConversationFinished, which this group also reads and keeps in a small SQLite table.
Before a batch of results is exported the conversations are read up to the end offsets
as they are *after* the batch was fetched: every result's conversation was written
before the result, so its ids are known by then. Offsets are committed only after the
endpoint accepted the batch: an outage is retried (backing off) until it ends, a crash
re-sends at most one batch (each event carries `passk.event_id`). Grading never waits
for any of this: it is another consumer group.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from pydantic import ValidationError

from schemas.events import GateResult, JudgeVerdict, TrialVerdict
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.kafka_client import kafka_client_kwargs
from services.otlp import semconv as sc
from services.otlp.evaluations import Evaluation, Graded, TraceRef, evaluation_of
from services.otlp.metrics import OtlpMetrics
from services.otlp.settings import OtlpSettings

log = logging.getLogger("passk.otlp.export")
RESULTS: dict[Topic, type[Graded]] = {
    Topic.JUDGE_VERDICTS: JudgeVerdict,
    Topic.GATE_RESULTS: GateResult,
    Topic.TRIAL_VERDICTS: TrialVerdict,
}
MAX_KEPT_TRACES = 1_000_000  # trial -> trace ids kept; the oldest go first


class TraceIndex:
    """trial_id -> the trace it came from, on disk (survives a restart with the offsets)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS traces (trial_id TEXT PRIMARY KEY, "
            "trace_id TEXT NOT NULL, span_id TEXT NOT NULL, seq INTEGER)"
        )

    def add(self, rows: Sequence[tuple[str, str, str]]) -> None:
        if not rows:
            return
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO traces VALUES (?, ?, ?, "
                "(SELECT COALESCE(MAX(seq), 0) + 1 FROM traces))",
                rows,
            )
            self.db.execute(
                "DELETE FROM traces WHERE seq <= (SELECT MAX(seq) FROM traces) - ?",
                (MAX_KEPT_TRACES,),
            )

    def get(self, trial_id: str) -> TraceRef | None:
        row = self.db.execute(
            "SELECT trace_id, span_id FROM traces WHERE trial_id = ?", (trial_id,)
        ).fetchone()
        return TraceRef(*row) if row else None


def _trace_row(value: bytes) -> tuple[str, str, str] | None:
    try:
        event = json.loads(value)
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    trial, trace = event.get("trial_id"), event.get("otel_trace_id")
    span = event.get("otel_span_id")
    if (
        isinstance(trial, str)
        and isinstance(trace, str)
        and isinstance(span, str)
        and all((trial, trace, span))
    ):
        return trial, trace, span
    return None


def to_log_records(evaluations: Sequence[Evaluation]) -> list[Any]:
    from opentelemetry import trace as otel_trace
    from opentelemetry._logs import LogRecord
    from opentelemetry.sdk._logs import ReadableLogRecord
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    resource = Resource.create({"service.name": "passk"})
    scope = InstrumentationScope(
        "passk.otlp", schema_url=f"https://opentelemetry.io/schemas/{sc.SEMCONV_VERSION}"
    )
    out = []
    for e in evaluations:
        context = None
        if e.trace is not None:
            span = otel_trace.NonRecordingSpan(
                otel_trace.SpanContext(
                    int(e.trace.trace_id, 16),
                    int(e.trace.span_id, 16),
                    is_remote=True,
                    trace_flags=otel_trace.TraceFlags(otel_trace.TraceFlags.SAMPLED),
                )
            )
            context = otel_trace.set_span_in_context(span)
        else:
            context = otel_trace.set_span_in_context(otel_trace.INVALID_SPAN)
        record = LogRecord(
            timestamp=e.timestamp_ns,
            observed_timestamp=e.timestamp_ns,
            context=context,
            event_name=sc.EVALUATION_EVENT,
            attributes=e.attributes,
            body=None,
        )
        out.append(
            ReadableLogRecord(log_record=record, resource=resource, instrumentation_scope=scope)
        )
    return out


def make_exporter(otlp: OtlpSettings) -> Any:
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    headers = dict(h.split("=", 1) for h in otlp.export_headers.split(",") if "=" in h)
    endpoint = otlp.export_endpoint or ""
    if not endpoint.rstrip("/").endswith("/v1/logs"):
        endpoint = endpoint.rstrip("/") + "/v1/logs"
    return OTLPLogExporter(
        endpoint=endpoint, headers=headers or None, timeout=otlp.export_timeout_s
    )


async def run_exporter(
    settings: Settings,
    otlp: OtlpSettings,
    metrics: OtlpMetrics,
    stop: asyncio.Event,
    exporter: Any = None,
) -> None:
    exporter = exporter or make_exporter(otlp)
    index = TraceIndex(settings.data_dir / "otlp-export.sqlite")
    conversations = topic_name(Topic.CONVERSATION_FINISHED, settings)
    kinds = {topic_name(t, settings): model for t, model in RESULTS.items()}
    consumer = AIOKafkaConsumer(
        conversations,
        *kinds,
        **kafka_client_kwargs(settings),
        group_id=f"{settings.topic_prefix}otlp",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    while not stop.is_set():
        try:
            await consumer.start()
            break
        except Exception as exc:  # the broker is away: try again, as every worker does
            log.warning("otlp export: broker unreachable (%s); retrying", exc)
            await _sleep(stop, 5.0)
    try:
        while not stop.is_set():
            try:
                await _one_batch(
                    consumer, conversations, kinds, index, exporter, metrics, otlp, stop
                )
            except Exception as exc:
                if stop.is_set():
                    break
                log.warning(
                    "otlp export: %s; retrying", exc, exc_info=log.isEnabledFor(logging.DEBUG)
                )
                await _sleep(stop, 2.0)
    finally:
        await consumer.stop()
        exporter.shutdown()


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


async def _one_batch(
    consumer: AIOKafkaConsumer,
    conversations: str,
    kinds: dict[str, type[Graded]],
    index: TraceIndex,
    exporter: Any,
    metrics: OtlpMetrics,
    otlp: OtlpSettings,
    stop: asyncio.Event,
) -> None:
    batch = await consumer.getmany(timeout_ms=1000, max_records=otlp.export_batch)
    results: list[tuple[str, Graded]] = []
    rows = []
    for tp, records in batch.items():
        for r in records:
            if tp.topic == conversations:
                if (row := _trace_row(r.value)) is not None:
                    rows.append(row)
                continue
            try:
                results.append((tp.topic, kinds[tp.topic].model_validate_json(r.value)))
            except ValidationError:
                log.warning("otlp export: unreadable %s record at offset %s", tp.topic, r.offset)
    index.add(rows)
    if not batch:
        return
    if results:
        await _catch_up(consumer, conversations, index)
        evaluations = [evaluation_of(event, index.get(event.trial_id)) for _, event in results]
        records = to_log_records(evaluations)
        delay = 1.0
        while True:
            outcome = await asyncio.to_thread(exporter.export, records)
            if getattr(outcome, "name", str(outcome)) == "SUCCESS":
                break
            metrics.export_failures.inc()
            if stop.is_set():
                return  # not committed: sent again after a restart
            await _sleep(stop, delay)
            delay = min(delay * 2, 30.0)
        for e in evaluations:
            metrics.evaluations_exported.labels(e.kind).inc()
    await consumer.commit()


async def _catch_up(consumer: AIOKafkaConsumer, conversations: str, index: TraceIndex) -> None:
    mine = [tp for tp in consumer.assignment() if tp.topic == conversations]
    if not mine:
        return
    ends = await consumer.end_offsets(mine)
    others = [tp for tp in consumer.assignment() if tp.topic != conversations]
    consumer.pause(*others)
    try:
        while [tp for tp in mine if await consumer.position(tp) < ends[tp]]:
            batch = await consumer.getmany(*mine, timeout_ms=1000)
            index.add(
                [
                    row
                    for records in batch.values()
                    for r in records
                    if (row := _trace_row(r.value)) is not None
                ]
            )
    finally:
        consumer.resume(*others)
