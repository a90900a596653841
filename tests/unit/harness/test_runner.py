from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from schemas.events import ConversationFinished, SessionPersisted
from schemas.scenario import Scenario
from services.harness.adapters import PythonClient
from services.harness.domain import Probed, plan_trials
from services.harness.probes import NoStateProbe
from services.harness.runner import Harness, UserFactory
from services.harness.target import PythonAgent
from tests.unit.harness import agents

Sent = list[tuple[ConversationFinished, SessionPersisted | None]]


def scenario(
    sid: str = "s", k: int = 3, script: tuple[str, ...] = ("a", "b", "c", "d"), **extra: object
) -> Scenario:
    return Scenario.model_validate(
        {
            "id": sid,
            "trials": k,
            "expected_exit": "product_closed",
            "user": {"script": list(script)},
            **extra,
        }
    ).versioned()


@pytest.fixture(autouse=True)
def _fresh_agent_sessions() -> Iterator[None]:
    agents.SESSIONS.clear()
    yield
    agents.SESSIONS.clear()


class FoundProbe:
    async def find(self, session_id: str) -> tuple[Probed | None, str | None]:
        return Probed({"session": session_id}, "product_closed"), None

    async def close(self) -> None:
        pass


def harness(
    fn: str,
    sent: Sent,
    *,
    timeout_s: float = 5.0,
    probe: object = None,
    publishing: threading.Event | None = None,
    release: threading.Event | None = None,
    concurrency: int = 4,
) -> Harness:
    def publish(c: ConversationFinished, s: SessionPersisted | None) -> str | None:
        if publishing is not None and release is not None:
            publishing.set()
            assert release.wait(5)
        sent.append((c, s))
        return None

    return Harness(
        run_id="r",
        agent=PythonClient(PythonAgent(kind="python", callable=fn)),
        probe=probe or NoStateProbe(),
        users=UserFactory(),
        publish=publish,
        timeout_s=timeout_s,
        concurrency=concurrency,
    )


async def test_the_product_closes_and_both_events_go_out() -> None:
    sent: Sent = []
    h = harness("tests.unit.harness.agents:closes_on_third", sent, probe=FoundProbe())
    summary = await h.run(plan_trials([scenario()], "r", 0))
    assert summary.published == 3 and summary.exits == {"product_closed": 3}
    conv, session = sent[0]
    assert conv.exit_reason == "product_closed" and conv.metrics.turns == 6
    assert conv.metrics.input_tokens == 6
    assert session is not None and session.session_id == conv.session_id
    assert session.exit_reason == "product_closed"


async def test_a_script_that_runs_out_is_persona_exhausted_and_without_a_session() -> None:
    sent: Sent = []
    h = harness("tests.unit.harness.agents:closes_on_third", sent)
    await h.run(plan_trials([scenario(script=("only", "two"))], "r", 1))
    conv, session = sent[0]
    assert conv.exit_reason == "persona_exhausted" and session is None
    assert conv.model_dump()["state_probe"] == "the target has no state probe"


async def test_a_slow_reply_times_out_and_the_others_go_on() -> None:
    sent: Sent = []
    h = harness("tests.unit.harness.agents:slow_for_trial_2", sent, timeout_s=0.2)
    summary = await h.run(plan_trials([scenario()], "r", 0))
    exits = {c.trial_id: (c.exit_reason, c.model_dump().get("harness_error")) for c, _ in sent}
    assert exits["r:s:002"] == ("timeout", "no agent reply within 0.2 s")
    assert exits["r:s:001"][0] == exits["r:s:003"][0] == "product_closed"
    assert summary.exits == {"product_closed": 2, "timeout": 1}
    assert any("r:s:002" == t and "timeout" in why for t, why in summary.errors)


async def test_max_duration_is_a_timeout_with_that_reason() -> None:
    sent: Sent = []
    h = harness("tests.unit.harness.agents:slow", sent, timeout_s=5)
    await h.run(plan_trials([scenario(k=1, limits={"max_duration_s": 0.2})], "r", 0))
    assert (
        sent[0][0].model_dump()["harness_error"] == "the conversation ran past max_duration_s=0.2"
    )


async def test_agent_failures_are_agent_errors_with_the_reason() -> None:
    sent: Sent = []
    await harness("tests.unit.harness.agents:raises", sent).run(
        plan_trials([scenario(k=1)], "r", 0)
    )
    await harness("tests.unit.harness.agents:garbage", sent).run(
        plan_trials([scenario("g", k=1)], "r", 0)
    )
    reasons = [c.model_dump()["harness_error"] for c, _ in sent]
    assert [c.exit_reason for c, _ in sent] == ["agent_error", "agent_error"]
    assert "RuntimeError: database is locked" in reasons[0]
    assert "not a JSON object" in reasons[1]


async def test_stop_cancels_conversations_but_finishes_a_trial_being_published() -> None:
    sent: Sent = []
    publishing, release = threading.Event(), threading.Event()
    # Trial 1 answers at once and is held inside publish; trial 2 hangs in its reply.
    h = harness(
        "tests.unit.harness.agents:slow_for_trial_2",
        sent,
        publishing=publishing,
        release=release,
        concurrency=2,
    )
    task = asyncio.create_task(h.run(plan_trials([scenario(k=2)], "r", 0)))
    assert await asyncio.to_thread(publishing.wait, 5)
    h.stop()
    await asyncio.sleep(0.05)
    assert not task.done()  # still waiting for the trial being published
    release.set()
    summary = await asyncio.wait_for(task, 5)
    assert [c.trial_id for c, _ in sent] == ["r:s:001"]  # published whole, nothing else
    assert summary.published == 1 and summary.interrupted == 1
    assert summary.exit_code() == 130


async def test_a_second_stop_or_the_grace_ends_the_wait_for_the_broker() -> None:
    # The broker never acknowledges: the publisher waits until the harness says to stop.
    h = harness("tests.unit.harness.agents:slow_for_trial_2", [], concurrency=2)
    publishing = threading.Event()

    def publish(c: ConversationFinished, s: SessionPersisted | None) -> str | None:
        publishing.set()
        assert h.stop_waiting.wait(30)
        return "conversation_finished not delivered: the run was stopped"

    h.publish = publish
    h.stop_grace_s = 0.3
    task = asyncio.create_task(h.run(plan_trials([scenario(k=2)], "r", 0)))
    assert await asyncio.to_thread(publishing.wait, 5)
    h.stop()
    summary = await asyncio.wait_for(task, 5)  # the grace, not the broker, ended it
    assert summary.undelivered == ["r:s:001"] and summary.interrupted == 1
    assert summary.exit_code() == 130


async def test_trials_the_broker_did_not_take_are_exit_4_first_planned_first() -> None:
    def publish(c: ConversationFinished, s: SessionPersisted | None) -> str | None:
        return None if c.trial_id.endswith("2") else "not acknowledged by the broker"

    h = harness("tests.unit.harness.agents:closes_on_third", [], concurrency=3)
    h.publish = publish
    summary = await h.run(plan_trials([scenario(k=3)], "r", 0))
    assert summary.undelivered == ["r:s:001", "r:s:003"] and summary.published == 1
    assert summary.exit_code() == 4


async def test_a_stop_that_lands_as_a_reply_arrives_still_ends_the_conversation() -> None:
    # Python 3.11's asyncio.wait_for returns the reply, not CancelledError, when the
    # cancel and the reply land in the same loop step: the conversation must not go on
    # to its next turn (here an agent that never answers).
    from services.harness.domain import parse_reply

    turns: list[int] = []

    class StopsAsItReplies:
        async def send(
            self, trial: object, run_id: str, session_id: str | None, message: str, history: object
        ) -> object:
            turns.append(len(turns) + 1)
            if len(turns) == 2:
                h.stop()  # the cancel is queued; the reply is returned in the same step
            elif len(turns) >= 3:
                await asyncio.Event().wait()  # hangs until cancelled
            return parse_reply({"session_id": "s1", "reply": "ok"})

        async def close(self) -> None:
            pass

    sent: Sent = []
    h = harness("tests.unit.harness.agents:closes_on_third", sent, timeout_s=60)
    h.agent = StopsAsItReplies()  # type: ignore[assignment]
    summary = await asyncio.wait_for(h.run(plan_trials([scenario(k=1)], "r", 0)), 5)
    assert turns == [1, 2]  # no third turn: the stop ended it
    assert sent == [] and summary.interrupted == 1 and summary.exit_code() == 130
