from __future__ import annotations

import aiohttp
import pytest

from services.judge.standin import MODEL, decide
from tests.unit.judge.conftest import StartStandin, standin_stats


@pytest.mark.parametrize(
    ("judge_id", "transcript", "passed"),
    [
        ("asked", '{"content": "hello"}', True),
        ("asked", '{"content": "x [[fail:asked]] y"}', False),
        ("asked", '{"content": "[[fail:asked_more]]"}', True),  # another judge's marker
        ("asked", '{"content": "[[fail:other]]"}', True),
        (None, '{"content": "[[fail:]]"}', True),
    ],
)
def test_the_documented_rule(judge_id: str | None, transcript: str, passed: bool) -> None:
    verdict, reason = decide(judge_id, transcript)
    assert verdict is passed
    assert reason.startswith("[stand-in]")
    if not passed:
        assert f"[[fail:{judge_id}]]" in reason


async def test_http_surface(standin: StartStandin) -> None:
    url = await standin()
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/chat/completions", json={"model": "m"}) as r:
            assert r.status == 400
            assert (await r.json())["error"]["message"].startswith("[stand-in]")
        async with http.post(f"{url}/chat/completions", data=b"{") as r:
            assert r.status == 400
        async with http.get(f"{url}/models") as r:
            assert (await r.json())["data"][0]["id"] == MODEL
        body = {"model": "m", "messages": [{"role": "user", "content": "judge_id: j\nhi"}]}
        async with http.post(f"{url}/chat/completions", json=body) as r:
            answer = await r.json()
            assert answer["model"] == MODEL and answer["usage"]["prompt_tokens"] > 0
    stats = await standin_stats(url)
    assert stats["stand_in"] is True and stats["requests"] == 3 and stats["bad_request"] == 2
    async with aiohttp.ClientSession() as http:
        await http.post(url.removesuffix("/v1") + "/stats/reset")
    assert (await standin_stats(url)).get("requests", 0) == 0


async def test_server_wide_fault_rates(standin: StartStandin) -> None:
    url = await standin(fail_rate_429=1.0, retry_after_s=2.5)
    body = {"model": "m", "messages": [{"role": "user", "content": "judge_id: j\nhi"}]}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/chat/completions", json=body) as r:
            assert r.status == 429 and r.headers["Retry-After"] == "2.5"


async def test_the_user_breaks_role_in_every_nth_conversation_it_starts(
    standin: StartStandin,
) -> None:
    from services.harness.user import USER_SIMULATOR_MARKER

    url = await standin(user_breaks_role_every=3)
    system = {
        "role": "system",
        "content": f"{USER_SIMULATOR_MARKER}\n<instructions>\nJob 4112. It seized.\n"
        "</instructions>",
    }
    wait = {"role": "user", "content": "(waiting)"}

    async def say(*history: dict) -> str:
        body = {"model": "m", "messages": [system, *history]}
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/chat/completions", json=body) as r:
                return (await r.json())["choices"][0]["message"]["content"]

    openings = [await say(wait) for _ in range(7)]
    broken = "Hello! I'm your assistant. How can I help you today?"
    # conversations 1, 4 and 7 open in the assistant's voice; the others as the user
    assert [o == broken for o in openings] == [True, False, False, True, False, False, True]
    assert set(openings) - {broken} == {"Job 4112."}
    # a broken conversation goes on as the assistant, then ends; a good one by the script
    went_on = await say(
        wait,
        {"role": "assistant", "content": broken},
        {"role": "user", "content": "What was the fault?"},
    )
    assert "help" in went_on and went_on != broken
    assert (
        await say(
            wait,
            {"role": "assistant", "content": "Job 4112."},
            {"role": "user", "content": "What was the fault?"},
        )
        == "It seized."
    )
    stats = await standin_stats(url)
    assert (stats["user_conversations"], stats["user_broke_role"]) == (7, 3)
