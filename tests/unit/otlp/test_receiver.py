"""The OTLP/HTTP receiver's contract, with a recording publisher (the Kafka path is the
e2e test's): answers, bounds, token, repeats, and a publishing outage."""

from __future__ import annotations

import gzip

from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from prometheus_client import CollectorRegistry

from schemas.events import DeadLetter
from services.otlp.mapping import Taken
from services.otlp.metrics import OtlpMetrics
from services.otlp.receiver import STATE, Receiver, make_app
from services.otlp.settings import OtlpSettings
from tests.unit.otlp.spans import agent_trace, request, span

PB = {"Content-Type": "application/x-protobuf"}


class Recorder:
    def __init__(self) -> None:
        self.taken: list[Taken] = []
        self.letters: list[DeadLetter] = []
        self.fail = False

    async def publish_letter(self, letter: DeadLetter) -> None:
        self.letters.append(letter)

    async def publish(self, taken: Taken) -> None:
        if self.fail:
            raise ConnectionError("broker down")
        self.taken.append(taken)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _client(scenarios=None, **settings):  # type: ignore[no-untyped-def]
    registry = CollectorRegistry()
    recorder, clock = Recorder(), Clock()
    receiver = Receiver(
        OtlpSettings(**settings),
        recorder,
        OtlpMetrics(registry),
        clock,
        scenarios=None if scenarios is None else (lambda: scenarios),
    )
    client = TestClient(TestServer(make_app(receiver)))
    await client.start_server()
    return client, recorder, registry, clock


def _v(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_a_trace_split_over_requests_is_published_once_its_root_arrives() -> None:
    client, rec, reg, _ = await _client()
    spans = agent_trace()
    try:
        for s in spans[:-1]:
            r = await client.post("/v1/traces", data=request(s).SerializeToString(), headers=PB)
            assert r.status == 200
        assert rec.taken == []
        zipped = gzip.compress(request(spans[-1]).SerializeToString())
        r = await client.post("/v1/traces", data=zipped, headers={**PB, "Content-Encoding": "gzip"})
        assert r.status == 200
        answer = ExportTraceServiceResponse.FromString(await r.read())
        assert answer.partial_success.rejected_spans == 0
        assert [t.conversation.trial_id for t in rec.taken] == ["t-1"]
        assert _v(reg, "passk_otlp_spans_received_total") == 4
        assert _v(reg, "passk_otlp_traces_completed_total") == 1
        # the same spans again: nothing published twice
        r = await client.post("/v1/traces", data=request(*spans).SerializeToString(), headers=PB)
        assert r.status == 200 and len(rec.taken) == 1
        assert _v(reg, "passk_otlp_spans_repeated_total") == 4
    finally:
        await client.close()


async def test_partial_success_names_traces_that_are_not_trials() -> None:
    client, rec, reg, _ = await _client()
    try:
        good, bad = agent_trace(1), agent_trace(2, {"passk.trial_id": ""})
        r = await client.post(
            "/v1/traces", data=request(*good, *bad).SerializeToString(), headers=PB
        )
        answer = ExportTraceServiceResponse.FromString(await r.read())
        assert answer.partial_success.rejected_spans == 4
        assert "no_passk_ids" in answer.partial_success.error_message
        assert len(rec.taken) == 1
        assert _v(reg, "passk_otlp_traces_skipped_total", reason="no_passk_ids") == 1
    finally:
        await client.close()


async def test_hostile_requests_are_refused_and_counted_and_the_next_trace_is_taken() -> None:
    client, rec, reg, _ = await _client(
        PASSK_OTLP_TOKEN="s3cret", PASSK_OTLP_MAX_BODY_BYTES=100_000
    )
    auth = {**PB, "Authorization": "Bearer s3cret"}
    try:
        body = request(*agent_trace()).SerializeToString()
        assert (await client.post("/v1/traces", data=body, headers=PB)).status == 401
        wrong = {**PB, "Authorization": "Bearer nope"}
        assert (await client.post("/v1/traces", data=body, headers=wrong)).status == 401
        big = b"\0" * 5_000_000
        assert (await client.post("/v1/traces", data=big, headers=auth)).status == 413

        async def chunks():  # type: ignore[no-untyped-def]
            for _ in range(50):
                yield b"\0" * 100_000

        assert (await client.post("/v1/traces", data=chunks(), headers=auth)).status == 413
        bomb = gzip.compress(b"\0" * 2_000_000)
        r = await client.post("/v1/traces", data=bomb, headers={**auth, "Content-Encoding": "gzip"})
        assert r.status == 413
        r = await client.post("/v1/traces", data=b"\x0a\xff\xff\xff\xff\x0f", headers=auth)
        assert r.status == 400
        text = {**auth, "Content-Type": "text/plain"}
        r = await client.post("/v1/traces", data=b"x", headers=text)
        assert r.status == 415
        assert rec.taken == []
        assert (await client.post("/v1/traces", data=body, headers=auth)).status == 200
        assert len(rec.taken) == 1
        assert _v(reg, "passk_otlp_requests_rejected_total", reason="unauthorized") == 2
        assert _v(reg, "passk_otlp_requests_rejected_total", reason="too_large") == 3
        assert _v(reg, "passk_otlp_requests_rejected_total", reason="malformed") == 1
    finally:
        await client.close()


async def test_open_traces_are_bounded_in_number_and_time() -> None:
    client, rec, reg, clock = await _client(PASSK_OTLP_MAX_PENDING_TRACES=10, PASSK_OTLP_IDLE_S=60)
    receiver = client.app[STATE]
    try:
        # 1,000 traces that never end, in 10 requests: a hundred times the bound
        for batch in range(10):
            spans = [span(10_000 + batch * 100 + i, 2, 1, "chat", {}) for i in range(100)]
            body = request(*spans).SerializeToString()
            r = await client.post("/v1/traces", data=body, headers=PB)
            assert r.status == 200
        assert len(receiver.pending) == 10
        dropped = _v(reg, "passk_otlp_traces_dropped_total", reason="too_many_pending_traces")
        assert dropped == 990
        assert _v(reg, "passk_otlp_pending_traces") == 10
        # a trace that never ends is dropped once idle
        clock.now = 61.0
        receiver.expire()
        assert len(receiver.pending) == 0
        assert _v(reg, "passk_otlp_traces_dropped_total", reason="idle") == 10
        r = await client.post(
            "/v1/traces", data=request(*agent_trace()).SerializeToString(), headers=PB
        )
        assert r.status == 200 and len(rec.taken) == 1
    finally:
        await client.close()


async def test_a_publishing_outage_is_503_and_the_retry_publishes() -> None:
    client, rec, reg, _ = await _client()
    spans = agent_trace()
    try:
        await client.post("/v1/traces", data=request(*spans[:2]).SerializeToString(), headers=PB)
        rec.fail = True
        r = await client.post(
            "/v1/traces", data=request(*spans[2:]).SerializeToString(), headers=PB
        )
        assert r.status == 503 and "Retry-After" in r.headers
        rec.fail = False
        r = await client.post(
            "/v1/traces", data=request(*spans[2:]).SerializeToString(), headers=PB
        )
        assert r.status == 200
        [taken] = rec.taken
        # the spans of the first request were kept through the outage
        assert len(taken.conversation.model_dump()["otel_tool_calls"]) == 1
    finally:
        await client.close()


async def test_json_in_json_out() -> None:
    client, rec, _, _ = await _client()
    from google.protobuf import json_format

    from tests.unit.otlp.spans import otlp_json

    try:
        r = await client.post("/v1/traces", json=otlp_json(request(*agent_trace())))
        assert r.status == 200 and r.content_type == "application/json"
        assert json_format.ParseDict(await r.json(), ExportTraceServiceResponse()) is not None
        assert len(rec.taken) == 1
    finally:
        await client.close()


async def test_plain_traces_become_trials_by_rule_and_the_rest_dead_letters() -> None:
    import asyncio
    import base64
    import json

    from schemas.scenario import Scenario
    from tests.unit.otlp.spans import plain_trace

    rules = [
        Scenario.model_validate(
            {
                "id": "support",
                "expected_exit": "resolved",
                "match": {"service.name": "support-agent"},
            }
        ).versioned()
    ]
    client, rec, reg, _ = await _client(scenarios=rules)
    try:
        r = await client.post(
            "/v1/traces",
            headers=PB,
            data=request(
                *plain_trace(21), resource={"service.name": "support-agent"}
            ).SerializeToString(),
        )
        assert r.status == 200
        r = await client.post(
            "/v1/traces",
            headers=PB,
            data=request(*plain_trace(22), resource={"service.name": "nobody"}).SerializeToString(),
        )
        assert r.status == 200
        answer = ExportTraceServiceResponse.FromString(await r.read())
        assert "no_matching_scenario" in answer.partial_success.error_message
        assert [(t.conversation.scenario_id, t.conversation.trial_id) for t in rec.taken] == [
            ("support", f"{21:032x}")
        ]
        async with asyncio.timeout(5):
            while not rec.letters:
                await asyncio.sleep(0.01)
        (letter,) = rec.letters
        assert (letter.reason, letter.source_topic) == ("no_matching_scenario", "otlp")
        assert base64.b64decode(letter.key_b64 or "") == f"{22:032x}".encode()
        excerpt = json.loads(base64.b64decode(letter.value_b64))
        assert excerpt["attributes"]["service.name"] == "nobody" and excerpt["spans"] == 4
        assert _v(reg, "passk_otlp_dead_letters_total", reason="no_matching_scenario") == 1
    finally:
        await client.close()


async def test_the_state_probe_supplies_the_session_of_a_trace_without_one() -> None:
    from types import SimpleNamespace

    class Probe:
        asked: list[str] = []

        async def find(self, session_id: str):  # type: ignore[no-untyped-def]
            self.asked.append(session_id)
            if session_id == "sess-1":
                return SimpleNamespace(state={"ticket": "closed"}, exit_reason="resolved"), None
            return None, "not found"

        async def close(self) -> None:
            return None

    registry = CollectorRegistry()
    recorder, probe = Recorder(), Probe()
    receiver = Receiver(OtlpSettings(), recorder, OtlpMetrics(registry), Clock(), probe=probe)
    client = TestClient(TestServer(make_app(receiver)))
    await client.start_server()
    try:
        r = await client.post(
            "/v1/traces", data=request(*agent_trace(31)).SerializeToString(), headers=PB
        )
        assert r.status == 200
        (taken,) = recorder.taken
        assert probe.asked == ["sess-1"]
        assert taken.session is not None and taken.session.state == {"ticket": "closed"}
        assert taken.session.exit_reason == "resolved"
    finally:
        await client.close()


async def test_held_spans_are_bounded_in_bytes_and_malformed_bodies_are_400() -> None:
    client, rec, reg, _ = await _client(
        PASSK_OTLP_MAX_PENDING_BYTES=3_000_000, PASSK_OTLP_OFFLOAD_BYTES=100_000
    )
    receiver = client.app[STATE]
    try:
        for i in range(10):  # 1 MB spans whose root never comes
            body = request(span(1 << 70 | i, 2, 1, "chat", {"big": "x" * 1_000_000}))
            r = await client.post("/v1/traces", data=body.SerializeToString(), headers=PB)
            assert r.status == 200
            assert receiver.pending.bytes <= 3_000_000
        assert _v(reg, "passk_otlp_traces_dropped_total", reason="too_many_pending_bytes") == 8
        assert _v(reg, "passk_otlp_pending_bytes") <= 3_000_000
        # a span alone larger than the bound: dropped at once, its later spans too
        body = request(span(1 << 71, 2, 1, "chat", {"big": "y" * 3_500_000}))
        assert (
            await client.post("/v1/traces", data=body.SerializeToString(), headers=PB)
        ).status == 200
        assert receiver.pending.bytes <= 3_000_000
        js = {"Content-Type": "application/json"}
        # (a gzip header followed by garbage: tests/e2e/test_otlp_attacks.py, real worker)
        for data, headers in [
            (b"[" * 100_000 + b"]" * 100_000, js),
            (b'{"resourceSpans": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001, js),
            (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', js),
        ]:
            r = await client.post("/v1/traces", data=data, headers=headers)
            assert r.status == 400, (r.status, data[:40])
        # and a good trace is still taken
        r = await client.post(
            "/v1/traces", data=request(*agent_trace(77)).SerializeToString(), headers=PB
        )
        assert r.status == 200 and rec.taken[-1].trace_id == f"{77:032x}"
    finally:
        await client.close()
