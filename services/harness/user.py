"""The simulated user. With a `script` it says those lines in order and then stops (no
model); otherwise a model plays the persona and instructions through the official openai
client, on any OpenAI-compatible endpoint, and ends by answering `[[done]]`. Either way,
the user ending or running out is `persona_exhausted`, never a product exit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from schemas.events import Message
from schemas.scenario import SimulatedUser

DONE = "[[done]]"
# The first line of the model user's system prompt. The offline stand-in
# (services/judge/standin.py) recognises a user-simulator request by it.
USER_SIMULATOR_MARKER = "passk user simulator"
STANDIN_MODEL = "passk-standin"


class User(Protocol):
    async def next_line(self, transcript: list[Message]) -> str | None:
        """What the user says next, or None: the user is done."""


@dataclass
class ScriptedUser:
    script: list[str]
    said: int = 0

    async def next_line(self, transcript: list[Message]) -> str | None:
        if self.said >= len(self.script):
            return None
        line = self.script[self.said]
        self.said += 1
        return line


def user_prompt(user: SimulatedUser) -> str:
    return (
        f"{USER_SIMULATOR_MARKER}\n"
        "You play the USER talking to an assistant; the assistant's messages come to you as "
        "user messages. Reply with only what the user says next, one short message. Stay in "
        "the persona and use only what the instructions say you know. When your goal is "
        f"reached, the assistant closed the conversation, or you have nothing to add, reply "
        f"exactly {DONE}.\n"
        f"<persona>\n{user.persona.strip()}\n</persona>\n"
        f"<instructions>\n{user.instructions.strip()}\n</instructions>"
    )


def flipped(transcript: list[Message]) -> list[dict[str, Any]]:
    """The conversation as the user model sees it: the agent's turns are its input."""
    out: list[dict[str, Any]] = []
    for m in transcript:
        if m.role == "assistant" and m.content:
            out.append({"role": "user", "content": m.content})
        elif m.role == "user" and m.content:
            out.append({"role": "assistant", "content": m.content})
    return out


@dataclass
class ModelUser:
    """A model playing the user. `client` is an `openai.AsyncOpenAI`."""

    user: SimulatedUser
    client: Any
    model: str
    stand_in: bool
    timeout_s: float = 60.0

    async def next_line(self, transcript: list[Message]) -> str | None:
        messages = [{"role": "system", "content": user_prompt(self.user)}, *flipped(transcript)]
        if len(messages) == 1:
            messages.append(
                {
                    "role": "user",
                    "content": "(the assistant is waiting for you to start the conversation)",
                }
            )
        response = await self.client.chat.completions.create(
            model=self.model, messages=messages, temperature=0, timeout=self.timeout_s
        )
        text = (response.choices[0].message.content or "").strip() if response.choices else ""
        if not text or text == DONE or text.endswith(DONE):
            return None
        return text

    def describe(self) -> dict[str, Any]:
        return {"kind": "model", "model": self.model, "stand_in": self.stand_in}
