"""Asking an OpenAI-compatible chat model for one verdict: bounded, retried, timed out.

The official `openai` async client does the HTTP (its own retries are off: this module
counts attempts, classifies causes and honours `Retry-After` itself).

* Concurrency: at most `concurrency` requests are in flight per client (one per worker);
  backoff sleeps do not hold a slot.
* Retries: 429, 5xx, timeouts, connection failures and malformed answers are retried up to
  `max_retries` times, with capped exponential backoff and jitter, or exactly the server's
  `Retry-After` / `retry-after-ms` when it sends one. Other 4xx are not retried.
* When the budget is spent the result carries the cause (`rate_limited`, `server_error`,
  `timeout`, `connection`, `malformed_answer`, `client_error`): the verdict is `error`.
* Outage (how no trial is lost, and the backlog drains): a spent budget with a transport
  cause becomes the trial's `error` verdict only when the model is shown to be answering:
  it answered other requests while this call was failing, or it answers a tiny canary
  judge call now. When the canary answers but nobody was answered during this call's
  attempts, the model has just come back, so the call is asked again once with a fresh
  budget. When the canary fails too, the model is down: the client closes its gate (no new
  call starts, so the worker stops taking trials: its agents wait here, and their offsets
  are not committed), probes with capped backoff until the model answers, then reopens the
  gate, and every held call is asked again with a fresh budget.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import openai

from schemas.events import Message
from services.judge import prompt as judge_prompt
from services.judge.domain import CallResult
from services.judge.metrics import JudgeMetrics

log = logging.getLogger(__name__)

TRANSPORT_CAUSES = frozenset({"rate_limited", "server_error", "timeout", "connection"})


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    max_retry_after_s: float = 60.0

    def delay(self, attempt: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        if retry_after_s is not None and retry_after_s >= 0:
            return min(retry_after_s, self.max_retry_after_s)
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return ceiling * (0.5 + random.random() / 2)  # jitter: retries of a burst spread out


def retry_after_seconds(
    headers: Mapping[str, str] | None, now: float | None = None
) -> float | None:
    """`retry-after-ms`, else `retry-after` as seconds or as an HTTP date; None when absent."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))


class _Failure(Exception):
    def __init__(self, cause: str, detail: str, retry_after_s: float | None = None) -> None:
        super().__init__(detail)
        self.cause, self.detail, self.retry_after_s = cause, detail, retry_after_s


def classify(exc: BaseException) -> _Failure:
    """An exception from the openai client (or our timeout) as a cause we can label and act on."""
    if isinstance(exc, _Failure):
        return exc
    if isinstance(exc, (openai.APITimeoutError, TimeoutError)):
        return _Failure("timeout", "the model did not answer within the timeout")
    if isinstance(exc, openai.APIConnectionError):
        return _Failure("connection", f"cannot reach the model: {exc}")
    if isinstance(exc, openai.APIStatusError):
        retry_after = retry_after_seconds(exc.response.headers)
        body = exc.body if isinstance(exc.body, dict) else {}
        detail = f"HTTP {exc.status_code}: {str(body.get('message') or exc.message)[:300]}"
        if exc.status_code == 429:
            return _Failure("rate_limited", detail, retry_after)
        if exc.status_code >= 500:
            return _Failure("server_error", detail, retry_after)
        return _Failure("client_error", detail)
    if isinstance(exc, judge_prompt.MalformedAnswer):
        return _Failure("malformed_answer", str(exc))
    return _Failure("client_error", f"{type(exc).__name__}: {exc}")


RETRYABLE = TRANSPORT_CAUSES | {"malformed_answer"}
CANARY = (
    "passk-canary",
    "The assistant greeted the user.",
    [Message(role="assistant", content="Hello!")],
)


class JudgeClient:
    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str | None,
        timeout_s: float = 30.0,
        concurrency: int = 16,
        policy: RetryPolicy | None = None,
        metrics: JudgeMetrics | None = None,
        outage_probe_min_s: float = 1.0,
        outage_probe_max_s: float = 30.0,
    ) -> None:
        self.model = model
        self.timeout_s = timeout_s
        self.policy = policy or RetryPolicy()
        self.metrics = metrics
        self.outage_probe_min_s = outage_probe_min_s
        self.outage_probe_max_s = outage_probe_max_s
        self._openai = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "unused",  # local servers (vLLM, Ollama, the stand-in) need none
            timeout=timeout_s,
            max_retries=0,
        )
        self._slots = asyncio.Semaphore(concurrency)
        self._up = asyncio.Event()
        self._up.set()
        self._probe_lock = asyncio.Lock()
        self._answered = 0  # requests the model answered (well-formed or not)
        self._outage_ended = 0.0
        self._answer_mode = "json_schema"  # switches to "tool" once if the server rejects it
        self.requests = 0

    async def close(self) -> None:
        await self._openai.close()

    @property
    def in_outage(self) -> bool:
        return not self._up.is_set()

    # ----------------------------------------------------------------- one request

    async def _request(self, judge_id: str, messages: list[dict[str, str]]) -> tuple[Any, float]:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0}
        if self._answer_mode == "json_schema":
            kwargs["response_format"] = judge_prompt.RESPONSE_FORMAT
        else:
            kwargs["tools"] = [judge_prompt.ANSWER_TOOL]
            kwargs["tool_choice"] = judge_prompt.ANSWER_TOOL_CHOICE
        async with self._slots:
            self.requests += 1
            started = time.perf_counter()
            try:
                # The client's own timeout covers the HTTP exchange; this one also covers a
                # server that trickles bytes forever.
                async with asyncio.timeout(self.timeout_s + 1.0):
                    completion = await self._openai.chat.completions.create(
                        **kwargs, timeout=self.timeout_s
                    )
            finally:
                elapsed = time.perf_counter() - started
                if self.metrics:
                    self.metrics.request_seconds.observe(elapsed)
        return completion, elapsed

    async def _ask_once(
        self, judge_id: str, messages: list[dict[str, str]]
    ) -> tuple[judge_prompt.Answer, Any, float]:
        try:
            completion, elapsed = await self._request(judge_id, messages)
        except openai.BadRequestError as exc:
            if self._answer_mode != "json_schema" or not _about_response_format(exc):
                raise
            # A server without JSON-schema response formats: ask with a forced tool call.
            log.warning("model rejected response_format (%s); using a tool call", exc.message)
            self._answer_mode = "tool"
            try:
                completion, elapsed = await self._request(judge_id, messages)
            except openai.BadRequestError:
                self._answer_mode = "json_schema"  # refused either way: not about the format
                raise
        self._answered += 1
        choice = completion.choices[0] if completion.choices else None
        try:
            answer = judge_prompt.parse_message(choice.message if choice else None)
        except judge_prompt.MalformedAnswer as exc:
            exc.completion = completion  # type: ignore[attr-defined]
            raise
        return answer, completion, elapsed

    async def _attempts(
        self, judge_id: str, messages: list[dict[str, str]], budget: int
    ) -> CallResult:
        """Up to `budget` attempts, backing off between them. Tokens are summed over every
        attempt that reached the model (`judge` sets the whole call's latency)."""
        tokens = (0, 0)
        model = self.model
        started = time.perf_counter()
        for attempt in range(1, budget + 1):
            try:
                answer, completion, elapsed = await self._ask_once(judge_id, messages)
            except Exception as exc:  # every failure is classified below
                failure = classify(exc)
                completion = getattr(exc, "completion", None)
                if completion is not None:  # a malformed answer still spent tokens
                    model = completion.model or model
                    tokens = _add_usage(completion, *tokens)
                if self.metrics:
                    self.metrics.error(judge_id, failure.cause)
                log.info("judge %s attempt %d: %s", judge_id, attempt, failure.detail)
                if failure.cause not in RETRYABLE or attempt == budget:
                    spent = (time.perf_counter() - started) * 1000
                    return CallResult(
                        None, failure.cause, failure.detail, attempt, spent,
                        tokens[0] or None, tokens[1] or None, model,
                    )  # fmt: skip
                await asyncio.sleep(self.policy.delay(attempt, failure.retry_after_s))
                continue
            tokens = _add_usage(completion, *tokens)
            return CallResult(
                answer, None, answer.reason, attempt, elapsed * 1000,
                tokens[0] or None, tokens[1] or None, completion.model or model,
            )  # fmt: skip
        raise AssertionError("unreachable")  # pragma: no cover

    # ----------------------------------------------------------------- one verdict

    async def judge(
        self, judge_id: str, assertion: str, transcript: Sequence[Message]
    ) -> CallResult:
        """One verdict, or its error cause once the budget is spent; never lost to an outage."""
        messages = judge_prompt.render(judge_id, assertion, transcript)
        attempts = 0
        spent = (0, 0)  # tokens of earlier rounds (a malformed answer still spends them)
        reasked = False
        started = time.perf_counter()
        while True:
            await self._up.wait()
            began, answered_before = time.monotonic(), self._answered
            result = await self._attempts(judge_id, messages, self.policy.max_retries + 1)
            attempts += result.attempts
            result.attempts = attempts
            spent = (spent[0] + (result.input_tokens or 0), spent[1] + (result.output_tokens or 0))
            result.input_tokens, result.output_tokens = spent[0] or None, spent[1] or None
            # The verdict's latency is the whole call: every attempt, backoff and outage wait.
            result.latency_ms = (time.perf_counter() - started) * 1000
            if result.cause is None or result.cause == "malformed_answer":
                return result
            whose = await self._whose_failure(
                began=began, answered_others=self._answered > answered_before, reasked=reasked
            )
            if whose == "trial":
                return result
            reasked = reasked or whose == "recovered"
            log.warning("judge %s failed while the model was down; asking again", judge_id)

    async def _whose_failure(self, *, began: float, answered_others: bool, reasked: bool) -> str:
        """Whose fault a spent budget was: "trial" (the model answers, so this call's failure
        is its own: an `error` verdict), "recovered" (the model answered nobody while this
        call failed, and answers now: ask again, once) or "outage" (the model was down and
        this call waited until it answered again: ask again)."""
        async with self._probe_lock:
            if self._outage_ended > began:
                return "outage"  # another call waited out the outage we failed in
            if answered_others:
                return "trial"
            if await self._canary():
                return "trial" if reasked else "recovered"
            self._up.clear()
            if self.metrics:
                self.metrics.outage.set(1)
            log.error("judge model is down (the canary fails too); holding trials until it answers")
            wait = self.outage_probe_min_s
            while not await self._canary():
                await asyncio.sleep(wait)
                wait = min(wait * 2, self.outage_probe_max_s)
            self._outage_ended = time.monotonic()
            self._up.set()
            if self.metrics:
                self.metrics.outage.set(0)
            log.warning("judge model answers again; resuming")
            return "outage"

    async def _canary(self) -> bool:
        judge_id, assertion, transcript = CANARY
        try:
            await self._ask_once(judge_id, judge_prompt.render(judge_id, assertion, transcript))
        except judge_prompt.MalformedAnswer:
            return True  # it answered; a bad answer is not an outage
        except Exception as exc:
            log.info("canary failed: %s", classify(exc).detail)
            return False
        return True


def _about_response_format(exc: openai.BadRequestError) -> bool:
    text = f"{exc.param or ''} {exc.message}".lower()
    return any(word in text for word in ("response_format", "json_schema", "response format"))


def _add_usage(completion: Any, input_tokens: int, output_tokens: int) -> tuple[int, int]:
    usage = getattr(completion, "usage", None)
    if usage is None:
        return input_tokens, output_tokens
    return (
        input_tokens + (usage.prompt_tokens or 0),
        output_tokens + (usage.completion_tokens or 0),
    )
