"""One keyed join: what the gate and the verdict each are around their pure domain.

A join reads two co-partitioned inputs keyed alike (the gate: a conversation and its
persisted session, by session_id; the verdict: a trial's gate results and judge verdicts,
by trial_id) and holds each key's state until its domain says it is complete or past its
deadline. Around the domain's pure functions (`awaiting`, `due_at`, `is_marker`, and
`on_tick` through the processor's handler) it holds, the same way for both:
- the pending states in a RAM table and the graded markers on disk (graded.KeyedStates);
- deadlines: a timer ticks each due key onto the processor's tick topic, read by the same
  agent in order with the inputs, and a tick is judged on its partition's stream clock,
  not the wall clock (ticks.Deadlines);
- flow control: a backlog's pending keys wait in the log, not in RAM (flow.JoinFlow);
- batching: a batch's outputs sent at once and delivered before its state is written,
  which keeps a killed worker from losing a trial or counting one twice (outbox.Outbox).
What is its own stays with the processor: decoding its inputs and what a decision does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

import faust
from pydantic import BaseModel

from schemas.scenario import Scenario
from services.contract.processors import ProcessorSpec
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.catalog import SCENARIO_GRACE_S, ScenarioCatalog, unknown_scenario
from services.runtime.agents import subscribe, through_outbox
from services.runtime.app import DeadLetters, Record, raw_topic
from services.runtime.flow import JoinFlow, join_flow
from services.runtime.graded import KeyedStates, graded_table
from services.runtime.outbox import Outbox
from services.runtime.ticks import Deadlines

S = TypeVar("S", bound=BaseModel)
M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Record], Awaitable[None]]
# (the tick's event, its key, the key's state, the stream clock of its partition)
TickHandler = Callable[[Record, str, Any, float], Awaitable[None]]


def input_waited_for(
    roles: Mapping[str, str], awaiting: Callable[[Any], str | None]
) -> Callable[[Any], str | None]:
    """A pending state -> the input topic it waits for, from the domain's name of it."""
    return lambda state: roles.get(awaiting(state) or "")


class KeyedJoin(Generic[S]):
    """A processor's join of `spec.joined` by key, its state a `state` model per key.

    `roles` names the joined inputs as the domain's `awaiting` does, in `spec.joined`'s
    order; `marked_at` is the state's field set once the key is graded (its marker is
    then kept on disk for the retention)."""

    def __init__(
        self,
        app: faust.App,
        spec: ProcessorSpec,
        settings: Settings,
        *,
        state: type[S],
        roles: tuple[str, str],
        marked_at: str,
        awaiting: Callable[[S], str | None],
        due_at: Callable[[S], float | None],
        is_marker: Callable[[S], bool],
    ) -> None:
        if spec.tick is None or len(spec.joined) != 2 or len(spec.tables) != 2:
            raise ValueError(
                f"{spec.name}: a keyed join needs a tick topic, two joined "
                "inputs and two tables (pending, graded)"
            )
        self.app = app
        self.spec = spec
        self.settings = settings
        self.model = state
        self.inputs = tuple(topic_name(t, settings) for t in spec.joined)
        self.tick_topic = topic_name(spec.tick, settings)
        self.catalog = ScenarioCatalog(settings)
        self.reject = DeadLetters(app, spec.name, settings)
        pending, graded = spec.tables
        self.pending = app.Table(pending.name, default=None, partitions=settings.topic_partitions)
        self.graded = graded_table(app, graded.name, settings)
        self.deadlines = Deadlines(
            app, self.pending, raw_topic(app, spec.tick, settings), settings, inputs=self.inputs
        )
        self.clock = self.deadlines.clock
        self.flow: JoinFlow = join_flow(
            app,
            self.pending,
            (self.inputs[0], self.inputs[1]),
            settings.join_max_pending,
            waits_on=input_waited_for(dict(zip(roles, self.inputs, strict=True)), awaiting),
            unread=lambda topic, p: not self.clock.caught_up(topic, p),
        )
        self.states = KeyedStates(
            self.pending,
            self.graded,
            self.deadlines.schedule,
            marked_at=lambda value: value[marked_at],
            retention_s=settings.dedup_retention_s,
            is_marker=is_marker,
            due_at=due_at,
            on_pending=self.flow.note,
        )
        # A batch holds each key's newest state as a model: several records of one key in
        # a batch are parsed once and dumped (and changelogged) once.
        self.outbox = Outbox(spec.name, self.states.read, self.states.store)

    # ------------------------------------------------------------------ state
    def load(self, key: str) -> S | None:
        held = self.outbox.get(key)
        if held is None or isinstance(held, self.model):
            return held
        return self.model.model_validate(held["state"])

    def store(self, key: str, state: S | None) -> None:
        """Written (None: forgotten) once the batch's outputs are delivered."""
        self.outbox.put(key, state)

    async def send(self, topic: faust.TopicT, key: str, value: bytes) -> None:
        """An output of the record being handled, delivered before its state is written."""
        await self.outbox.send(topic, key.encode(), value)

    # ------------------------------------------------------------------ inputs
    async def decoded(self, event: Record, model: type[M]) -> M | None:
        """The record as `model`, or None once it is a dead letter."""
        return await self.reject.decoded(event, model)

    async def scenario(
        self, event: Record, scenario_id: str, version: str | None = None
    ) -> Scenario | None:
        """The scenario (version) an input names, waited for a moment (published just
        before its traffic, it may not be read yet); None once the input is a dead letter."""
        found = await self.catalog.published(scenario_id, version, timeout=SCENARIO_GRACE_S)
        if found is None:
            await self.reject(event, unknown_scenario(scenario_id, version))
        return found

    # ------------------------------------------------------------------ the agent
    def agent(
        self,
        name: str,
        *,
        on_input: Mapping[Topic, Handler],
        on_tick: TickHandler,
        apart: Mapping[Topic, Handler] | None = None,
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """The join's agent `name`, reading `spec.agents[name]` in batches: a tick loads its
        key's state (none: nothing to do) and is handled at the stream clock of its
        partition; a joined input moves that clock, then goes to `on_input[topic]`; a topic
        `apart` (re-grades) goes to its handler untouched. Whatever a record raises makes it
        a dead letter, and the stream goes on."""
        routes = {topic_name(t, self.settings): h for t, h in on_input.items()}
        aside = {topic_name(t, self.settings): h for t, h in (apart or {}).items()}

        async def handle(event: Record) -> None:
            message = event.message
            topic = message.topic
            if topic in aside:
                return await aside[topic](event)
            if topic == self.tick_topic:
                key = event.key.decode() if event.key else ""
                state = self.load(key)
                if state is None:
                    return None
                # Deadlines run on how far the inputs have been read, not on the wall
                # clock: a restarted worker does not give up on inputs in its backlog.
                return await on_tick(
                    event, key, state, self.clock.now_for(self.inputs, message.partition)
                )
            self.clock.observe(topic, message.partition, message.offset, message.timestamp)
            return await routes[topic](event)

        async def ready() -> None:
            await self.catalog.ready()
            if before is not None:
                await before()

        subscribe(
            self.app,
            self.spec,
            self.settings,
            {
                name: through_outbox(
                    self.outbox,
                    self.reject,
                    handle,
                    batch_max=self.settings.batch_max,
                    within_s=self.settings.batch_within_s,
                    before=ready,
                )
            },
        )


class JoinSteps:
    """Base of a keyed join's steps (the gate's, the verdict's): the processor's name, its
    scenario catalog and its dead letters are its join's, so a step cannot refuse or wait
    on another than the join does."""

    join: KeyedJoin[Any]

    @property
    def processor(self) -> str:
        return self.join.spec.name

    @property
    def catalog(self) -> ScenarioCatalog:
        return self.join.catalog

    @property
    def reject(self) -> DeadLetters:
        return self.join.reject
