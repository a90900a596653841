"""The reference product's dialogue: a deterministic debrief assistant, no model.

It asks a fixed list of questions, reads each answer with a few plain rules, files the
debrief (the persisted session) and closes the conversation by its own signal:
`handed_off` when a return visit is needed (dispatch books it), else `product_closed`.
A first message that asks a question ("quick question: ...?") is answered and closed at
once, with nothing filed.

Faults, switchable per trial (the fault plan, see `faults_for`), each one a real bug a
gate must catch:

- `lost_field`: the billing lines are never persisted (the state gate).
- `silent_close`: it says the debrief is filed but never signals the close (the exit gate).
- `repeated_question`: it re-asks a question already answered (a judge).
- `hang`, `http_500`, `drop_connection`, `garbage`: the service misbehaves at the third
  reply (the harness's `timeout` / `agent_error`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

FAULTS = ("lost_field", "silent_close", "repeated_question",
          "hang", "http_500", "drop_connection", "garbage")
TRANSPORT_FAULTS = ("hang", "http_500", "drop_connection", "garbage")
TRANSPORT_FAULT_AT = 3  # the reply number at which a transport fault strikes

QUESTIONS: list[tuple[str, str]] = [
    ("fault", "What was the fault?"),
    ("steps", "What did you do to fix it?"),
    ("parts", "Which parts did you fit? Give the part codes, or say none."),
    ("tests", "How did you test it afterwards?"),
    ("warranty", "Is the unit under warranty? If it is, give me the claim number."),
    ("safety", "Was there any safety incident on site? If so, how severe, and what did you do?"),
    ("billability", "What is billable? Give me the codes and quantities."),
    ("follow_up", "Does the job need a return visit?"),
]
QUICK_ANSWER = ("Flue clamps take 5 Nm on every boiler we service; the manufacturer's "
                "sheet has the rest. Call the tech desk for anything else.")
_CODE = re.compile(r"\b([A-Z]{2,}(?:-[A-Z0-9]+)+)\b(?:\s*(?:x|×)\s*(\d+))?")
_CLAIM = re.compile(r"\bWC-\d{6}\b")
_JOB = re.compile(r"\b(\d{3,7})\b")
_NO = re.compile(r"^\s*(no|none|nope|nothing)\b", re.IGNORECASE)
_SEVERITY = re.compile(r"\b(low|medium|high|critical)\b", re.IGNORECASE)


# ------------------------------------------------------------------ the fault plan


def parse_plan(data: Any) -> dict[str, dict[str, list[int] | str]]:
    """{scenario_id: {fault: [trial numbers] | "*"}}; refused when malformed."""
    if not isinstance(data, dict):
        raise ValueError("the fault plan must map scenario ids to {fault: [trial numbers]}")
    for scenario, faults in data.items():
        if not isinstance(faults, dict):
            raise ValueError(f"{scenario}: must map faults to trial numbers")
        for fault, trials in faults.items():
            if fault not in FAULTS:
                known = ", ".join(FAULTS)
                raise ValueError(f"{scenario}: unknown fault {fault!r} (known: {known})")
            if trials != "*" and not (isinstance(trials, list)
                                      and all(isinstance(t, int) for t in trials)):
                raise ValueError(f"{scenario}.{fault}: give a list of trial numbers or \"*\"")
    return data


def faults_for(plan: dict[str, dict[str, list[int] | str]], scenario_id: str | None,
               trial_number: int | None) -> list[str]:
    """The faults this product switches on for one trial (none without a trial)."""
    if scenario_id is None or trial_number is None:
        return []
    chosen = plan.get(scenario_id, {})
    return sorted(f for f, trials in chosen.items() if trials == "*" or trial_number in trials)


# ------------------------------------------------------------------ reading answers


def codes(text: str) -> list[dict[str, Any]]:
    return [{"code": code, "qty": int(qty or 1)} for code, qty in _CODE.findall(text)]


def _clean(text: str) -> str:
    return " ".join(text.split())


@dataclass
class Debrief:
    """One session's progress; what `to_state` files is the persisted session."""

    job: str | None = None
    step: int = 0  # index into QUESTIONS of the question last asked
    answers: dict[str, str] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    replies: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "step": self.step, "answers": self.answers,
                "faults": self.faults, "replies": self.replies}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Debrief:
        return cls(**data)

    def to_state(self) -> dict[str, Any]:
        a = self.answers
        parts = [] if _NO.match(a.get("parts", "")) else codes(a.get("parts", ""))
        report: dict[str, Any] = {
            "fault": _clean(a.get("fault", "")),
            "steps": _clean(a.get("steps", "")),
            "parts": parts,
            "tests": _clean(a.get("tests", "")),
            "summary": _clean(f"{a.get('fault', '')} {a.get('steps', '')}"),
        }
        claim = _CLAIM.search(a.get("warranty", ""))
        if claim and not _NO.match(a.get("warranty", "")):
            report["warranty"] = {"claim_number": claim.group(0)}
        state: dict[str, Any] = {"job": self.job, "report": report}
        safety = a.get("safety", "")
        if safety and not _NO.match(safety):
            severity = _SEVERITY.search(safety)
            state["safety"] = {"incident": True,
                               "severity": severity.group(1).lower() if severity else None,
                               "actions": _clean(safety)}
        else:
            state["safety"] = {"incident": False}
        if "lost_field" not in self.faults:
            state["billability"] = codes(a.get("billability", ""))
        follow = a.get("follow_up", "")
        if follow and not _NO.match(follow):
            on_order = codes(follow)
            on_order_said = re.search(r"\border", follow, re.IGNORECASE)
            state["follow_up"] = {
                "reason": "part_on_order" if on_order_said else "return_visit",
                "parts_on_order": on_order,
                "note": _clean(follow),
            }
        return state


@dataclass(frozen=True)
class Turn:
    reply: str
    exit_reason: str | None = None
    file: bool = False  # persist the debrief now


def respond(debrief: Debrief, message: str) -> Turn:
    """The product's next reply; updates `debrief` in place."""
    debrief.replies += 1
    if debrief.job is None:
        if "?" in message and re.search(r"\bquick question\b", message, re.IGNORECASE):
            debrief.job = "-"
            return Turn(QUICK_ANSWER, "product_closed")
        job = _JOB.search(message)
        debrief.job = job.group(1) if job else "unknown"
        debrief.step = 0
        return Turn(f"Debrief for job {debrief.job}. {QUESTIONS[0][1]}")
    slot = QUESTIONS[debrief.step][0]
    debrief.answers[slot] = message
    debrief.step += 1
    if debrief.step < len(QUESTIONS):
        question = QUESTIONS[debrief.step][1]
        if "repeated_question" in debrief.faults and QUESTIONS[debrief.step][0] == "parts":
            # The bug: it forgets it already has the fault and asks for it again.
            question = f"Sorry, what was the fault again? And: {question}"
        return Turn(f"Noted. {question}")
    follow_up = "follow_up" in debrief.to_state()
    if "silent_close" in debrief.faults:
        # The bug: completion claimed in words, never signalled.
        return Turn(f"Thanks, the debrief for job {debrief.job} is filed. Closing the session.",
                    None, file=True)
    if follow_up:
        return Turn(f"The debrief for job {debrief.job} is filed and dispatch will book the "
                    "return visit. Handing you over.", "handed_off", file=True)
    return Turn(f"Thanks, the debrief for job {debrief.job} is filed. Closing the session.",
                "product_closed", file=True)
