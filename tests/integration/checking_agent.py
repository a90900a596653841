"""An in-process agent for `passk run` (the `python` adapter imports it by name) that
reports external checks with its replies, as an agent wrapped by an evaluator would."""

from __future__ import annotations

from typing import Any


def reply(request: dict[str, Any]) -> dict[str, Any]:
    """Closes on the second message. Every reply reports `pii_scan` (trial 002 leaks in its
    first reply and is clean after: the leak must still count) and `tone`, an evaluator
    result no scenario names (curt in trial 001)."""
    trial = request["passk"]["trial_id"]
    session = request["session_id"] or f"s-{trial}"
    first = request["session_id"] is None
    leaked = trial.endswith(":002") and first
    return {
        "session_id": session,
        "reply": "Noted." if first else "Thanks, closing.",
        "exit_reason": None if first else "product_closed",
        "checks": [
            {
                "id": "pii_scan",
                "passed": not leaked,
                "reason": "card number echoed" if leaked else "no PII",
            },
            {"id": "tone", "passed": not trial.endswith(":001"), "reason": "curt"},
        ],
    }
