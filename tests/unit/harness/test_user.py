from __future__ import annotations

from openai import AsyncOpenAI

from schemas.events import Message
from schemas.scenario import SimulatedUser
from services.harness.user import (
    USER_SIMULATOR_MARKER,
    ModelUser,
    ScriptedUser,
    flipped,
    user_prompt,
)
from services.judge import standin as standin_module
from services.judge.standin import simulate_user
from tests.unit.judge.conftest import StartStandin, standin_stats

PERSONA = SimulatedUser(
    persona="Terse technician.", instructions="Job 4112. The pump had seized! Replaced it?"
)


async def test_a_script_is_said_in_order_then_the_user_is_done() -> None:
    user = ScriptedUser(["one", "two"])
    assert [await user.next_line([]), await user.next_line([]), await user.next_line([])] == [
        "one",
        "two",
        None,
    ]


def test_the_user_model_sees_the_conversation_from_the_user_side() -> None:
    transcript = [
        Message(role="user", content="hi"),
        Message(role="assistant", content="job?"),
        Message(role="assistant", content=None),
    ]
    assert flipped(transcript) == [
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "job?"},
    ]
    assert user_prompt(PERSONA).startswith(USER_SIMULATOR_MARKER)
    assert USER_SIMULATOR_MARKER == standin_module.USER_SIMULATOR_MARKER  # the two sides agree


def test_the_stand_in_user_says_the_instructions_one_sentence_a_turn_then_done() -> None:
    system = {"role": "system", "content": user_prompt(PERSONA)}
    said = [{"role": "assistant", "content": "x"}]
    assert simulate_user({"messages": [system]}) == "Job 4112."
    assert simulate_user({"messages": [system, *said]}) == "The pump had seized!"
    assert simulate_user({"messages": [system, *said * 2]}) == "Replaced it?"
    assert simulate_user({"messages": [system, *said * 3]}) == "[[done]]"


async def test_a_model_user_through_the_openai_client_against_the_stand_in(
    standin: StartStandin,
) -> None:
    base_url = await standin()
    client = AsyncOpenAI(base_url=base_url, api_key="stand-in", max_retries=0)
    user = ModelUser(PERSONA, client, "passk-standin", stand_in=True)
    transcript: list[Message] = []
    lines = []
    while (line := await user.next_line(transcript)) is not None:
        lines.append(line)
        transcript += [
            Message(role="user", content=line),
            Message(role="assistant", content="go on"),
        ]
    await client.close()
    assert lines == ["Job 4112.", "The pump had seized!", "Replaced it?"]
    assert user.describe() == {"kind": "model", "model": "passk-standin", "stand_in": True}
    stats = await standin_stats(base_url)
    assert stats["user_turns"] == 4 and stats.get("completions", 0) == 0  # no verdicts
