"""The openai_chat adapter through the official client against a local OpenAI-compatible
server that closes the conversation with the exit tool on its second answer."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from schemas.scenario import Scenario
from services.harness.adapters import OpenAIChatClient
from services.harness.domain import plan_trials
from services.harness.probes import NoStateProbe
from services.harness.runner import Harness, UserFactory
from services.harness.target import OpenAIChatAgent


def completion(content: str | None, calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
    }


async def test_the_exit_tool_ends_it_and_tool_calls_are_recorded() -> None:
    seen: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append({"body": body, "session": request.headers.get("X-Session-Id")})
        if len(body["messages"]) < 3:
            return web.json_response(completion("Which job?", None))
        call = {
            "id": "t1",
            "type": "function",
            "function": {
                "name": "end_conversation",
                "arguments": json.dumps({"exit_reason": "handed_off"}),
            },
        }
        return web.json_response(completion("Handing you over.", [call]))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    agent = OpenAIChatClient(
        OpenAIChatAgent(
            kind="openai_chat",
            model="m",
            base_url=f"http://127.0.0.1:{port}/v1",
            system_prompt="You are the debrief assistant.",
        )
    )
    sent: list[Any] = []
    scenario = Scenario.model_validate(
        {
            "id": "s",
            "trials": 1,
            "expected_exit": "handed_off",
            "user": {"script": ["hi", "job 1", "more"]},
        }
    ).versioned()
    harness = Harness(
        run_id="r",
        agent=agent,
        probe=NoStateProbe(),
        users=UserFactory(),
        publish=lambda c, s: sent.append(c),
        timeout_s=5,
    )
    await harness.run(plan_trials([scenario], "r", 0))
    await agent.close()
    await runner.cleanup()
    event = sent[0]
    assert event.exit_reason == "handed_off" and event.session_id == "r:s:001"
    assert event.transcript[-1].tool_calls[0]["function"]["name"] == "end_conversation"
    assert event.metrics.input_tokens == 14 and event.metrics.output_tokens == 4
    # the whole history each turn, the session named in the header and `user`
    assert [m["role"] for m in seen[1]["body"]["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]
    assert seen[1]["session"] == "r:s:001" and seen[1]["body"]["user"] == "r:s:001"
    assert seen[0]["body"]["tools"][0]["function"]["name"] == "end_conversation"
