"""The judge client against a real local stand-in: real HTTP, the official openai client."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx2
import openai
import pytest
from prometheus_client import CollectorRegistry

from schemas.events import Message
from services.judge.client import (
    RETRYABLE,
    JudgeClient,
    RetryPolicy,
    classify,
    retry_after_seconds,
)
from services.judge.metrics import JudgeMetrics
from services.judge.prompt import MalformedAnswer
from tests.support import await_condition
from tests.unit.judge.conftest import StartStandin, standin_stats

FAST = RetryPolicy(max_retries=2, base_delay_s=0.01, max_delay_s=0.05)


def transcript(*extra: str) -> list[Message]:
    return [
        Message(role="user", content="The pump was leaking; I replaced it."),
        Message(role="assistant", content="Which part number did you fit? " + " ".join(extra)),
    ]


def client(base_url: str, **kw: object) -> JudgeClient:
    options: dict[str, object] = {"timeout_s": 5.0, "concurrency": 8, "policy": FAST}
    options.update(kw)
    return JudgeClient(model="gpt-4o-mini", base_url=base_url, api_key="standin", **options)  # type: ignore[arg-type]


async def test_answers_are_structured_and_labelled_as_the_stand_in(standin: StartStandin) -> None:
    judge = client(await standin())
    ok = await judge.judge("asked_part", "The agent asked for the part number.", transcript())
    bad = await judge.judge("asked_part", "x", transcript("[[fail:asked_part]]"))
    other = await judge.judge("other", "x", transcript("[[fail:asked_part]]"))
    assert ok.answer is not None and ok.answer.passed is True and ok.cause is None
    assert ok.model == "passk-standin" and ok.answer.reason.startswith("[stand-in]")
    assert ok.attempts == 1 and ok.input_tokens and ok.output_tokens and ok.latency_ms > 0
    assert bad.answer is not None and bad.answer.passed is False
    assert "[[fail:asked_part]]" in bad.answer.reason
    assert other.answer is not None and other.answer.passed is True
    await judge.close()


async def test_429_honours_retry_after_then_errors(standin: StartStandin) -> None:
    url = await standin(retry_after_s=0.6)
    judge = client(url, policy=RetryPolicy(max_retries=1, base_delay_s=0.01, max_delay_s=0.01))
    started = time.monotonic()
    result = await judge.judge("j", "x", transcript("[[standin:429]]"))
    assert time.monotonic() - started >= 2 * 0.6  # the backoff alone would be 0.01 s
    assert result.answer is None and result.cause == "rate_limited"
    assert result.detail == "HTTP 429: [stand-in] injected rate limit"
    stats = await standin_stats(url)
    # Alone, nothing proves the failure is this trial's: two attempts, a canary that answers,
    # two more attempts (the model may have just come back), a canary again, then error.
    assert result.attempts == 4 and stats["fault_429"] == 4 and stats["completions"] == 2
    await judge.close()


@pytest.mark.parametrize(
    ("marker", "cause", "faults"),
    [
        ("[[standin:500]]", "server_error", "fault_500"),
        ("[[standin:malformed]]", "malformed_answer", "fault_malformed"),
        ("[[standin:hang]]", "timeout", "fault_hang"),
    ],
)
async def test_faults_are_retried_then_become_errors(
    standin: StartStandin, marker: str, cause: str, faults: str
) -> None:
    url = await standin()
    judge = client(url, timeout_s=0.4)
    budget = FAST.max_retries + 1
    # Beside other trials that the model answers, the failure is this trial's own.
    faulty, *others = await asyncio.gather(
        judge.judge("j", "x", transcript(marker)),
        *(judge.judge(f"ok{i}", "x", transcript()) for i in range(4)),
    )
    assert all(o.answer is not None and o.answer.passed for o in others)
    assert faulty.answer is None and faulty.cause == cause and faulty.attempts == budget
    # Alone, it is asked again once (with a fresh budget) after a canary answers.
    alone = await judge.judge("j", "x", transcript(marker))
    assert alone.answer is None and alone.cause == cause
    expected = budget if cause == "malformed_answer" else 2 * budget  # an answer is no outage
    assert alone.attempts == expected
    assert (await standin_stats(url))[faults] == budget + expected
    await judge.close()


async def test_a_server_without_json_schema_is_asked_with_a_tool_call(
    standin: StartStandin,
) -> None:
    url = await standin(json_schema=False)
    judge = client(url)
    result = await judge.judge("j", "x", transcript("[[fail:j]]"))
    assert result.answer is not None and result.answer.passed is False
    assert judge._answer_mode == "tool"
    assert (await standin_stats(url))["bad_request"] == 1  # only the first, refused, request
    await judge.close()


async def test_an_outage_holds_calls_and_the_backlog_drains(standin: StartStandin) -> None:
    # 12 requests fail: more than any call's budget (3), so without the outage gate
    # these trials would have become errors.
    url = await standin(fail_first=12)
    registry = CollectorRegistry()
    judge = client(
        url, outage_probe_min_s=0.05, outage_probe_max_s=0.1, metrics=JudgeMetrics(registry)
    )
    results = await asyncio.gather(*(judge.judge(f"j{i}", "x", transcript()) for i in range(5)))
    assert all(r.answer is not None and r.answer.passed for r in results), results
    assert any(r.attempts > FAST.max_retries + 1 for r in results)
    stats = await standin_stats(url)
    assert stats["fault_500"] == 12
    assert not judge.in_outage and registry.get_sample_value("passk_judge_model_outage") == 0
    assert registry.get_sample_value(
        "passk_judge_errors_total", {"judge": "j0", "cause": "server_error"}
    )
    await judge.close()


async def test_unreachable_model_is_an_outage_not_an_error(standin: StartStandin) -> None:
    judge = client("http://127.0.0.1:9/v1", outage_probe_min_s=0.05, outage_probe_max_s=0.05)
    probes = 0
    canary = judge._canary

    async def counted_canary() -> bool:
        nonlocal probes
        probes += 1
        return await canary()

    judge._canary = counted_canary  # type: ignore[method-assign]
    task = asyncio.create_task(judge.judge("j", "x", transcript()))
    # Held through several failed probes of the outage, not burnt into an error verdict.
    await await_condition(lambda: probes >= 5, timeout=30, what="five failed outage probes")
    assert judge.in_outage
    assert not task.done(), task
    task.cancel()
    await judge.close()


async def test_many_calls_are_in_flight_at_once_and_bounded(standin: StartStandin) -> None:
    url = await standin(latency_ms=200)
    judge = client(url, concurrency=8)
    results = await asyncio.gather(*(judge.judge(f"j{i}", "x", transcript()) for i in range(24)))
    assert all(r.answer for r in results)
    stats = await standin_stats(url)
    # Bounded by the client, and reached: eight at once, never one at a time. (Counted by
    # the stand-in, not timed: a wall-clock bound failed on a loaded machine.)
    assert stats["max_in_flight"] == 8
    await judge.close()


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"Retry-After": "2"}, 2.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"Retry-After": "soon"}, None),
    ],
)
def test_retry_after_header(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after_seconds(headers) == seconds


def test_retry_after_as_an_http_date() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    header = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds({"Retry-After": header}, now=now.timestamp()) == 30.0


def test_backoff_is_capped_and_retry_after_wins() -> None:
    policy = RetryPolicy(max_retries=5, base_delay_s=0.5, max_delay_s=4.0, max_retry_after_s=20)
    for attempt in range(1, 8):
        delay = policy.delay(attempt)
        ceiling = min(4.0, 0.5 * 2 ** (attempt - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert policy.delay(1, retry_after_s=3.0) == 3.0
    assert policy.delay(1, retry_after_s=600.0) == 20


def _status_error(cls: type[openai.APIStatusError], status: int, **headers: str) -> Exception:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx2.Response(status, headers=headers, request=request)
    return cls("Error code", response=response, body={"message": "the server's words"})


@pytest.mark.parametrize(
    ("exc", "cause", "retry_after"),
    [
        (_status_error(openai.RateLimitError, 429, **{"retry-after": "3"}), "rate_limited", 3.0),
        (_status_error(openai.InternalServerError, 503), "server_error", None),
        (_status_error(openai.AuthenticationError, 401), "client_error", None),
        (_status_error(openai.BadRequestError, 400), "client_error", None),
        (TimeoutError(), "timeout", None),
        (MalformedAnswer("not JSON"), "malformed_answer", None),
    ],
)
def test_causes(exc: Exception, cause: str, retry_after: float | None) -> None:
    failure = classify(exc)
    assert failure.cause == cause and failure.retry_after_s == retry_after
    if isinstance(exc, openai.APIStatusError):
        assert failure.detail.endswith("the server's words")
    assert (cause in RETRYABLE) is (cause != "client_error")
