"""Transcripts that read like a debrief call, with a judge's failure marker when planned."""

from __future__ import annotations

import json
import random
from typing import Any, Literal

from schemas.events import Message
from schemas.scenario import Scenario
from services.replay.generate.values import leaf_name


def fail_marker(judge_id: str) -> str:
    """What makes the offline stand-in judge fail exactly this judge."""
    return f"[[fail:{judge_id}]]"


SYSTEM_PROMPT = "You are the debrief assistant. Collect every required detail, then close."
_OPENERS = [
    "Hi, I'm calling to debrief the job I just finished.",
    "Hello, I need to log the visit from this morning.",
    "Hi there, I'm done on site and want to close this out.",
]
_ACKS = ["Got it, thanks.", "Understood.", "Thanks, noted.", "Okay, that's clear."]
_USER_FILLERS = [
    "That's right.",
    "No, nothing else on that one.",
    "Yes, the customer signed off before I left.",
    "I think that covers it.",
]


def _field_label(path: str) -> str:
    return leaf_name(path).replace("_", " ")


def _facts(state: dict[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(k, v)
        elif value not in (None, "", [], {}):
            out.append((prefix, value))

    walk("value", state)
    return out


def _spoken(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k.replace('_', ' ')} {_spoken(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_spoken(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _user_says(label: str, value: Any) -> str:
    return f"For the {label.replace('_', ' ')}: {_spoken(value)}."


def build_transcript(
    scenario: Scenario,
    state: dict[str, Any],
    rng: random.Random,
    *,
    turns: int,
    closed: bool,
    marker: str | None,
    call_id: str,
) -> list[Message]:
    """System prompt, then `turns` user/assistant messages; tool plumbing never counts."""
    recorded = [
        _field_label(e.path) for e in scenario.outcome if e.operator != "present" or e.present
    ]
    with_tool = turns >= 3 and rng.random() < 0.4
    closing_turns = 2 if with_tool else 1
    body_turns = max(turns - closing_turns, 0)
    # Alternate so the body ends on a user message, right before the assistant closes.
    roles: list[Literal["user", "assistant"]] = [
        "user" if (body_turns - 1 - i) % 2 == 0 else "assistant" for i in range(body_turns)
    ]
    facts = _facts(state)
    rng.shuffle(facts)
    messages = [
        Message(role="system", content=f"{SYSTEM_PROMPT} {scenario.description}".strip()),
    ]
    asks = [f"Could you tell me the {lbl}?" for lbl in recorded] or ["What else should I note?"]
    fact_i = ask_i = 0
    for i, role in enumerate(roles):
        if role == "user":
            if i == 0:
                text = rng.choice(_OPENERS)
            elif facts and fact_i < len(facts):
                text = _user_says(*facts[fact_i])
                fact_i += 1
            else:
                text = rng.choice(_USER_FILLERS)
        elif i == 0:
            text = "Hi, this is the debrief assistant. Which job are we closing today?"
        else:
            text = f"{rng.choice(_ACKS)} {asks[ask_i % len(asks)]}"
            ask_i += 1
        messages.append(Message(role=role, content=text))
    if with_tool:
        messages.append(
            Message(
                role="assistant",
                content=None,
                tool_calls=[
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "save_debrief",
                            "arguments": json.dumps({"fields": recorded}),
                        },
                    }
                ],
            )
        )
        messages.append(
            Message(
                role="tool",
                tool_call_id=call_id,
                name="save_debrief",
                content=json.dumps({"ok": True}),
            )
        )
    if closed:
        listed = ", ".join(recorded) if recorded else "everything"
        closing = f"Thanks, that's everything. I've recorded the {listed}. Closing the session now."
    else:
        closing = "Sorry, could you go over the last part again?"
    messages.append(Message(role="assistant", content=closing))
    if marker:
        spoken = [m for m in messages if m.role == "assistant" and m.content]
        chosen = rng.choice(spoken)
        chosen.content = f"{chosen.content} {marker}"
    return messages
