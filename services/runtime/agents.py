"""A processor's agents, declared from the registry: each agent reads the topics
`ProcessorSpec.agents` gives it, under its registry name, so the topology is written
once (services/contract/processors.py) and an app says only what each agent does.

Three ways an agent reads, the same for every processor:
- `each_record`: one record after another, each guarded (a record the handler cannot use
  becomes a dead letter and the stream goes on);
- `through_outbox`: in bounded batches whose outputs are delivered before their state is
  written and the batch acked (outbox.Outbox);
- `in_batches`: in bounded batches handed whole to the processor (the sink's one
  transaction, the aggregate's coalesced writes).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial

import faust

from services.contract.processors import ProcessorSpec
from services.contract.settings import Settings
from services.runtime.app import DeadLetters, Record, raw_inputs
from services.runtime.outbox import Outbox

Agent = Callable[[faust.StreamT[bytes]], Awaitable[None]]
Handler = Callable[[Record], Awaitable[None]]
Before = Callable[[], Awaitable[None]]


def subscribe(
    app: faust.App,
    spec: ProcessorSpec,
    settings: Settings,
    agents: Mapping[str, Agent],
    *,
    concurrency: Mapping[str, int] | None = None,
) -> None:
    """Declare each of `agents` on the topics `spec.agents` names for it; every agent of
    the registry must be given, and no other (`concurrency`: instances of an agent that
    may run side by side, 1 unless said)."""
    if set(agents) != set(spec.agents):
        raise ValueError(
            f"{spec.name}: agents {sorted(agents)} do not match the "
            f"registry's {sorted(spec.agents)}"
        )
    concurrency = concurrency or {}
    if stray := set(concurrency) - set(agents):
        raise ValueError(f"{spec.name}: concurrency for agents it has not: {sorted(stray)}")
    for name, run in agents.items():
        channel = raw_inputs(app, *spec.agents[name], settings=settings)
        app.agent(channel, name=f"{spec.module}.{name}", concurrency=concurrency.get(name, 1))(
            _labelled(run, spec.module, name)
        )


def _labelled(run: Agent, module: str, name: str) -> Agent:
    """`run` as the agent it is: Faust labels an agent in its logs and its crash reports by
    its function's module and qualified name, which would otherwise be this module's
    closure (`services.runtime.agents.each_record.<locals>.run`) for them all."""

    async def agent(stream: faust.StreamT[bytes]) -> None:
        await run(stream)

    agent.__module__, agent.__name__, agent.__qualname__ = module, name, name
    return agent


def each_record(reject: DeadLetters, handle: Handler, *, before: Before | None = None) -> Agent:
    """Records one after another, each handled as `handle` under the dead-letter guard
    (`before`: awaited once, before the first record is read)."""

    async def run(stream: faust.StreamT[bytes]) -> None:
        if before is not None:
            await before()
        async for record in stream.events():
            await reject.guard(record, handle)

    return run


def through_outbox(
    outbox: Outbox,
    reject: DeadLetters,
    handle: Handler,
    *,
    batch_max: int,
    within_s: float,
    concurrently: bool = False,
    before: Before | None = None,
) -> Agent:
    """Records in batches of at most `batch_max` (waiting at most `within_s` for one to
    fill), each handled under the dead-letter guard (one after another, or
    `concurrently`); a batch's outputs are delivered before its state is written."""

    async def run(stream: faust.StreamT[bytes]) -> None:
        if before is not None:
            await before()
        await outbox.run(
            stream,
            partial(reject.guard, handle=handle),
            batch_max=batch_max,
            within_s=within_s,
            concurrently=concurrently,
        )

    return run


def in_batches(
    handle_batch: Callable[[Sequence[Record]], Awaitable[None]], *, batch_max: int, within_s: float
) -> Agent:
    """Records in batches of at most `batch_max` (waiting at most `within_s` for one to
    fill), each batch handed whole to `handle_batch`; acked when the next is taken."""

    async def run(stream: faust.StreamT[bytes]) -> None:
        # take_events is on faust.Stream, missing from the StreamT protocol in its stubs.
        batches = stream.take_events(batch_max, within=within_s)  # type: ignore[attr-defined]
        async for records in batches:
            await handle_batch(records)

    return run
