"""The offline stand-in judge: a local OpenAI-compatible HTTP server. NOT a model.

`passk judge-standin` serves `POST /v1/chat/completions` so that the judge processor's real
client path (HTTP, JSON-schema answers, retries, timeouts) runs without a key or a model.
Its verdicts follow one simple, deterministic rule, and every answer says it is a stand-in
(`"model": "passk-standin"`, reasons start with `[stand-in]`):

    An assertion PASSES unless the transcript contains the marker `[[fail:<judge_id>]]`,
    in which case that judge FAILS, with a reason quoting the marker.

The judge id is read from the prompt's `judge_id: <id>` line and markers are looked for
only inside the prompt's `<transcript>` block (see `services.judge.prompt`).

Fault injection, per trial (a marker in the transcript makes every request for it misbehave):
`[[standin:429]]` (429 with `Retry-After`), `[[standin:500]]`, `[[standin:hang]]` (never
answers) and `[[standin:malformed]]` (200 with an answer that is not a verdict).
Server-wide (CLI flags or env): `--latency-ms` before every answer, `--fail-rate-429` and
`--fail-rate-500` (random, seeded), `--fail-first N` (the first N requests get 500, then it
recovers: a model outage that ends), `--retry-after` seconds, and `--no-json-schema`
(reject `response_format` with 400, like servers that only offer tool calls).

User simulator (for `passk run`): a request whose system message starts with
`passk user simulator` gets a deterministic user line instead of a verdict: the n-th
sentence of its `<instructions>` block on the user's n-th turn, then `[[done]]` (the user
is done). Its answers say `"model": "passk-standin"`; the harness records that the user
was played by the stand-in. With `--user-breaks-role-every N` every N-th conversation it
starts (the 1st, the N+1-th, ...) the user breaks role instead: it answers as the
assistant would (`BROKEN_ROLE_LINES`, then done), what a simulated user's check catches.

`GET /stats` returns request counters (`requests`, `completions`, per-fault counts) and
`POST /stats/reset` zeroes them; tests use them to prove that cache hits make no call.
It binds 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from services.judge.prompt import ANSWER_NAME, judge_id_of, transcript_of

MODEL = "passk-standin"
# The first line of the harness's user-simulator prompt (services/harness/user.py).
USER_SIMULATOR_MARKER = "passk user simulator"
USER_DONE = "[[done]]"
_INSTRUCTIONS = re.compile(r"<instructions>\s*(.*?)\s*</instructions>", re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
FAULT_MARKER = re.compile(r"\[\[standin:(429|500|hang|malformed)\]\]")
STATS_KEY: web.AppKey[Counter[str]] = web.AppKey("stats", Counter)


@dataclass
class StandinConfig:
    latency_ms: float = 0.0
    fail_rate_429: float = 0.0
    fail_rate_500: float = 0.0
    fail_first: int = 0
    retry_after_s: float = 1.0
    hang_s: float = 3600.0
    json_schema: bool = True
    seed: int = 0
    # Every N-th conversation the stand-in user starts, it answers as the assistant (0: never).
    user_breaks_role_every: int = 0
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)


CONFIG_KEY = web.AppKey("config", StandinConfig)


def decide(judge_id: str | None, transcript: str) -> tuple[bool, str]:
    """The stand-in's whole rule. Pure, so it is documented by its tests."""
    marker = f"[[fail:{judge_id}]]"
    if judge_id and marker in transcript:
        return False, f"[stand-in] the transcript contains the marker {marker}, so this judge fails"
    return True, (
        f"[stand-in] no {marker} marker in the transcript, so this judge passes "
        "(a deterministic stand-in rule, not a model's judgement)"
    )


# What a user that broke role says: the assistant's lines, not the user's.
BROKEN_ROLE_LINES = (
    "Hello! I'm your assistant. How can I help you today?",
    "Of course, I can help you with that. Is there anything else I can do?",
)


def simulate_user(body: dict[str, Any], breaks_role: bool = False) -> str:
    """The stand-in user's whole rule: the instructions' sentences in order, one per user
    turn (the user's own earlier turns are the request's assistant messages), then done.
    A conversation whose user opened with the role-breaking line (`breaks_role` on its first
    turn) goes on with the assistant's lines."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    own = [m.get("content") for m in messages if m.get("role") == "assistant"]
    if (breaks_role and not own) or (own and own[0] == BROKEN_ROLE_LINES[0]):
        return BROKEN_ROLE_LINES[len(own)] if len(own) < len(BROKEN_ROLE_LINES) else USER_DONE
    system = next((m.get("content") for m in messages if m.get("role") == "system"), "") or ""
    found = _INSTRUCTIONS.search(system if isinstance(system, str) else "")
    sentences = [s.strip() for s in _SENTENCE_END.split(found.group(1))] if found else []
    sentences = [s for s in sentences if s]
    said = sum(1 for m in messages if m.get("role") == "assistant")
    return sentences[said] if said < len(sentences) else USER_DONE


def _is_user_simulation(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    content = first.get("content")
    return (
        first.get("role") == "system"
        and isinstance(content, str)
        and content.startswith(USER_SIMULATOR_MARKER)
    )


def _error(
    status: int, message: str, kind: str, headers: dict[str, str] | None = None
) -> web.Response:
    body = {"error": {"message": f"[stand-in] {message}", "type": kind, "code": status}}
    return web.json_response(body, status=status, headers=headers)


def _prompt_text(body: dict[str, Any]) -> str:
    parts = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # content parts
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(parts)


def _completion(content: str | None, tool_args: str | None, prompt_chars: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    finish = "stop"
    if tool_args is not None:
        finish = "tool_calls"
        message["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": ANSWER_NAME, "arguments": tool_args},
            }
        ]
    completion_chars = len(content or tool_args or "")
    prompt_tokens, completion_tokens = max(1, prompt_chars // 4), max(1, completion_chars // 4)
    return {
        "id": f"chatcmpl-standin-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL,
        "system_fingerprint": "passk-standin",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


async def chat_completions(request: web.Request) -> web.StreamResponse:
    stats = request.app[STATS_KEY]
    stats["in_flight"] += 1
    stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
    try:
        return await _answer(request)
    finally:
        stats["in_flight"] -= 1


async def _answer(request: web.Request) -> web.StreamResponse:
    config, stats = request.app[CONFIG_KEY], request.app[STATS_KEY]
    stats["requests"] += 1
    number = stats["requests"]
    try:
        body = await request.json()
    except json.JSONDecodeError:
        stats["bad_request"] += 1
        return _error(400, "the body is not JSON", "invalid_request_error")
    if not isinstance(body, dict) or not body.get("messages"):
        stats["bad_request"] += 1
        return _error(400, "messages is required", "invalid_request_error")
    if body.get("response_format") and not config.json_schema:
        stats["bad_request"] += 1
        return _error(400, "response_format is not supported here", "invalid_request_error")
    if config.latency_ms:
        await asyncio.sleep(config.latency_ms / 1000)

    text = _prompt_text(body)
    if _is_user_simulation(body):
        stats["user_turns"] += 1
        breaks = False
        if not any(
            isinstance(m, dict) and m.get("role") == "assistant" for m in body.get("messages") or []
        ):
            stats["user_conversations"] += 1
            every = config.user_breaks_role_every
            breaks = bool(every) and (stats["user_conversations"] - 1) % every == 0
            stats["user_broke_role"] += int(breaks)
        return web.json_response(_completion(simulate_user(body, breaks), None, len(text)))
    transcript = transcript_of(text) or ""
    fault = FAULT_MARKER.search(transcript)
    retry_after = {"Retry-After": f"{config.retry_after_s:g}"}
    if number <= config.fail_first:
        stats["fault_500"] += 1
        return _error(
            500,
            f"injected outage (request {number} of the first {config.fail_first})",
            "server_error",
        )
    if (fault and fault.group(1) == "429") or config.rng.random() < config.fail_rate_429:
        stats["fault_429"] += 1
        return _error(429, "injected rate limit", "rate_limit_error", retry_after)
    if (fault and fault.group(1) == "500") or config.rng.random() < config.fail_rate_500:
        stats["fault_500"] += 1
        return _error(500, "injected server error", "server_error")
    if fault and fault.group(1) == "hang":
        stats["fault_hang"] += 1
        await asyncio.sleep(config.hang_s)  # cancelled when the client gives up
        return _error(504, "hang ended", "server_error")

    judge_id = judge_id_of(text)
    passed, reason = decide(judge_id, transcript)
    answer = json.dumps({"passed": passed, "reason": reason})
    if fault and fault.group(1) == "malformed":
        stats["fault_malformed"] += 1
        answer = "[stand-in] injected malformed answer: this is not a verdict"
    use_tool = not body.get("response_format") and bool(body.get("tools"))
    stats["completions"] += 1
    stats["passed" if passed else "failed"] += 1
    payload = _completion(None if use_tool else answer, answer if use_tool else None, len(text))
    return web.json_response(payload)


async def stats(request: web.Request) -> web.Response:
    counts: Counter[str] = request.app[STATS_KEY]
    return web.json_response({"model": MODEL, "stand_in": True, **counts})


async def reset_stats(request: web.Request) -> web.Response:
    stats = request.app[STATS_KEY]
    in_flight = stats["in_flight"]  # requests still being answered will decrement it
    stats.clear()
    stats["in_flight"] = in_flight
    return web.json_response({"reset": True})


async def models(request: web.Request) -> web.Response:
    return web.json_response(
        {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "passk stand-in"}]}
    )


def make_app(config: StandinConfig | None = None) -> web.Application:
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app[CONFIG_KEY] = config or StandinConfig()
    app[STATS_KEY] = Counter()
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", stats)
    app.router.add_post("/stats/reset", reset_stats)
    return app


async def start(
    config: StandinConfig | None = None, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, int]:
    """Start in the running loop (tests, benchmark); returns the runner and the bound port."""
    # Cancel hanging handlers when their client goes away, and do not wait for them on exit.
    runner = web.AppRunner(make_app(config), handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, runner.addresses[0][1]


def serve(config: StandinConfig, host: str = "127.0.0.1", port: int = 8400) -> None:
    """Run until interrupted; prints the base URL once listening (port 0 picks a free one)."""

    async def main() -> None:
        runner, bound = await start(config, host, port)
        print(
            f"passk judge stand-in (not a model) listening on http://{host}:{bound}/v1", flush=True
        )
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
