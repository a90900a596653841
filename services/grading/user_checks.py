"""A scenario's `user_checks` judge the simulated user, not the agent: each is graded as a
judge whose id is `user:<id>` over the user's view of the trial (its persona and
instructions, then the conversation's user and assistant turns). One that fails makes the
trial `invalid` (services/verdict/domain.py).

Here, below the processors, because two of them read a trial the same way: the judge
processor grading a user check, and `passk calibrate` grading it over a labelled set.
"""

from __future__ import annotations

from schemas.events import ConversationFinished, Message
from schemas.scenario import JudgeSpec, Scenario

USER_CHECK_PREFIX = "user:"


def user_check_specs(scenario: Scenario) -> list[JudgeSpec]:
    """The scenario's user checks as judges named `user:<id>` (a judge of the same id
    stays apart)."""
    return [s.model_copy(update={"id": f"{USER_CHECK_PREFIX}{s.id}"}) for s in scenario.user_checks]


def user_view(trial: ConversationFinished, scenario: Scenario) -> ConversationFinished:
    """The trial as a user check reads it: a system message saying whom the simulated user
    was told to play, then the user's and the assistant's turns (tool and system messages
    of the product left out). Deterministic kinds read the user's turns by role (a regex
    check with `role: user`)."""
    user = scenario.user
    told = (
        "The simulated user (the `user` turns below) was told to play this persona "
        "and to follow these instructions; the checks judge the user, not the "
        "assistant.\n"
        f"<persona>\n{(user.persona if user else '').strip()}\n</persona>\n"
        f"<instructions>\n{(user.instructions if user else '').strip()}\n</instructions>"
    )
    turns = [m for m in trial.transcript if m.role in ("user", "assistant")]
    return trial.model_copy(update={"transcript": [Message(role="system", content=told), *turns]})
