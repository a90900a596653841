"""Running the planned trials: bounded concurrency, one conversation per trial, the state
probe, then both events published together.

Stopping (SIGINT, SIGTERM): trials still talking or probing are cancelled and nothing of
them is sent; a trial already publishing finishes publishing (its sends are waited for, at
most `stop_grace_s` more, or not at all after a second signal), so no trial is left half
in the log: its conversation is sent only once its session is acknowledged. Trials not
started are not started.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from schemas.events import ConversationFinished, SessionPersisted
from schemas.scenario import Scenario
from services.harness.adapters import AgentClient
from services.harness.domain import (
    PERSONA_EXHAUSTED,
    TIMEOUT,
    AgentError,
    Conversation,
    FinishedTrial,
    PlannedTrial,
    Probed,
    RunSummary,
    after_reply,
    conversation_event,
    session_event,
    user_gives_up,
)
from services.harness.probes import StateProbe
from services.harness.user import ModelUser, ScriptedUser, User


class UserSimulatorFailed(Exception):
    """The simulated user could not speak (its model endpoint failed): not the agent's
    fault, so the trial is not published; run the same id again to retry it."""


@dataclass
class UserFactory:
    """Builds each trial's user: the script when there is one, else the model."""

    model_client: Any = None  # openai.AsyncOpenAI, made only when a scenario needs it
    model: str = ""
    stand_in: bool = False

    def __call__(self, scenario: Scenario) -> tuple[User, dict[str, Any]]:
        user = scenario.user
        assert user is not None  # scenarios without one are refused before the run
        if user.script is not None:
            return ScriptedUser(list(user.script)), {"kind": "script"}
        if self.model_client is None:
            raise UserSimulatorFailed("no model client for the simulated user")
        model_user = ModelUser(user, self.model_client, self.model, self.stand_in)
        return model_user, model_user.describe()


Publish = Callable[[ConversationFinished, SessionPersisted | None], str | None]


@dataclass
class Harness:
    run_id: str
    agent: AgentClient
    probe: StateProbe
    users: UserFactory
    publish: Publish  # blocking, bounded; None when every event was acknowledged, else why
    timeout_s: float
    agent_version: str | None = None
    concurrency: int = 4
    on_trial: Callable[[str, str], None] = lambda trial_id, what: None
    # Set `stop_grace_s` after a stop (at once on a second one): the publisher stops
    # waiting for the broker then, and the trials it waited for are not delivered.
    stop_waiting: threading.Event = field(default_factory=threading.Event)
    stop_grace_s: float = 10.0
    summary: RunSummary = field(default_factory=RunSummary)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _playing: set[asyncio.Task[Any]] = field(default_factory=set)
    _accounted: int = 0  # trials started (whatever became of them)

    def stop(self) -> None:
        """Stop cleanly: cancel what is talking, finish what is publishing, waiting for the
        broker at most `stop_grace_s` more (asked again: not at all)."""
        if self._stopping.is_set():
            self.stop_waiting.set()
            self._cancel_playing()  # again: a cancel can be lost (see converse)
            return
        self._stopping.set()
        self._cancel_playing()
        asyncio.get_running_loop().call_later(self.stop_grace_s, self._grace_over)

    def _grace_over(self) -> None:
        self.stop_waiting.set()
        self._cancel_playing()  # a conversation still going had its cancel lost

    def _cancel_playing(self) -> None:
        for task in list(self._playing):
            task.cancel()

    def _check_stopping(self) -> None:
        """A stopped run talks no more. Python 3.11's asyncio.wait_for returns the reply
        instead of raising when the cancel lands as the reply arrives (fixed in 3.12), and
        the conversation would then go on to its next turn, to an agent that may hang."""
        if self._stopping.is_set():
            raise asyncio.CancelledError

    async def converse(self, planned: PlannedTrial) -> FinishedTrial:
        scenario = planned.scenario
        user, described = self.users(scenario)
        conversation = Conversation()
        started = time.monotonic()
        limit = scenario.limits.max_duration_s
        exit_reason, harness_error = PERSONA_EXHAUSTED, None
        while True:
            self._check_stopping()
            if user_gives_up(scenario, conversation):
                break
            try:
                line = await user.next_line(conversation.transcript)
            except Exception as exc:  # the user's model endpoint, not the agent
                raise UserSimulatorFailed(
                    f"the simulated user failed: {type(exc).__name__}: {exc}"
                ) from None
            if line is None:
                break
            self._check_stopping()
            conversation.said_by_user(line)
            wait = self.timeout_s
            if limit is not None:
                wait = min(wait, max(limit - (time.monotonic() - started), 0.001))
            sent = time.monotonic()
            try:
                reply = await asyncio.wait_for(
                    self.agent.send(
                        planned, self.run_id, conversation.session_id, line, conversation.transcript
                    ),
                    wait,
                )
            except TimeoutError:
                exit_reason = TIMEOUT
                harness_error = (
                    f"no agent reply within {wait:g} s"
                    if wait == self.timeout_s
                    else f"the conversation ran past max_duration_s={limit:g}"
                )
                break
            except AgentError as exc:
                exit_reason, harness_error = exc.exit_reason, exc.reason
                break
            conversation.replied(reply, (time.monotonic() - sent) * 1000)
            step = after_reply(scenario, conversation, reply)
            if step != "continue":
                exit_reason = step
                break
        return FinishedTrial(
            planned=planned,
            run_id=self.run_id,
            agent_version=self.agent_version,
            exit_reason=exit_reason,
            conversation=conversation,
            duration_ms=(time.monotonic() - started) * 1000,
            finished_at=datetime.now(UTC),
            harness_error=harness_error,
            user_simulator=described,
        )

    async def play(self, planned: PlannedTrial) -> tuple[FinishedTrial, Probed | None, str | None]:
        finished = await self.converse(planned)
        self._check_stopping()  # a stop that landed as the last reply came: no probing
        probed, why = None, None
        if planned.scenario.has_state_gate:
            if finished.conversation.session_id is None:
                why = "the agent named no session, so there is none to read"
            else:
                probed, why = await self.probe.find(finished.conversation.session_id)
        return finished, probed, why

    async def one(self, planned: PlannedTrial, slots: asyncio.Semaphore) -> None:
        async with slots:
            if self._stopping.is_set():
                return
            self._accounted += 1
            task = asyncio.create_task(self.play(planned))
            self._playing.add(task)
            try:
                finished, probed, why = await task
            except asyncio.CancelledError:
                self.summary.interrupted += 1
                self.on_trial(planned.trial_id, "interrupted")
                return
            except UserSimulatorFailed as exc:
                self.summary.not_published += 1
                self.summary.errors.append((planned.trial_id, str(exc)))
                self.on_trial(planned.trial_id, "not published")
                return
            finally:
                self._playing.discard(task)
        self.summary.run += 1
        self.summary.exits[finished.exit_reason] += 1
        if finished.harness_error:
            self.summary.errors.append(
                (planned.trial_id, f"{finished.exit_reason}: {finished.harness_error}")
            )
        session = session_event(finished, probed) if probed is not None else None
        if session is not None:
            self.summary.sessions_found += 1
        conversation = conversation_event(
            finished, state_probe=why if planned.scenario.has_state_gate else None
        )
        # Not cancellable: once started, a trial's events are all sent and waited for.
        failed = await asyncio.shield(asyncio.to_thread(self.publish, conversation, session))
        if failed is None:
            self.summary.published += 1
            self.on_trial(planned.trial_id, finished.exit_reason)
        else:
            self.summary.not_published += 1
            self.summary.undelivered.append(planned.trial_id)
            self.summary.errors.append((planned.trial_id, f"not published: {failed}"))
            self.on_trial(planned.trial_id, "not published")

    async def run(self, plan: list[PlannedTrial]) -> RunSummary:
        slots = asyncio.Semaphore(self.concurrency)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        try:
            jobs = [asyncio.create_task(self.one(p, slots)) for p in plan]
            # Every job ends by itself (stop() only cancels the conversations), so the
            # publishing ones are always waited for.
            await asyncio.gather(*jobs)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.remove_signal_handler(sig)
                except (NotImplementedError, RuntimeError):
                    pass
        if self._stopping.is_set():
            # Trials never started count as interrupted too: the run did not do them.
            self.summary.interrupted += len(plan) - self._accounted
        order = {p.trial_id: i for i, p in enumerate(plan)}
        self.summary.undelivered.sort(key=order.__getitem__)
        return self.summary
