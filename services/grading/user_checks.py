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
from services.grading.kinds import USER_ROLE

USER_CHECK_PREFIX = "user:"


def user_check_specs(scenario: Scenario) -> list[JudgeSpec]:
    """The scenario's user checks as judges named `user:<id>` (a judge of the same id
    stays apart). A `regex` check with no `role` reads the user's turns (a judge's
    default, `assistant`, would book the agent's words as the user's; the loader refuses
    any other role in a user check)."""
    out = []
    for spec in scenario.user_checks:
        update: dict[str, object] = {"id": f"{USER_CHECK_PREFIX}{spec.id}"}
        if spec.kind == "regex" and "role" not in spec.params:
            update["role"] = USER_ROLE
        out.append(spec.model_copy(update=update))
    return out


def user_view(trial: ConversationFinished, scenario: Scenario) -> ConversationFinished:
    """The trial as a user check reads it: a system message saying whom the simulated user
    was told to play, then the user's and the assistant's turns (tool and system messages
    of the product left out). A `regex` check reads the user's turns (`role: user`, its
    default here)."""
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
