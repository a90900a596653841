"""`passk import otel`: OTLP files to trials. Every file is read whole first (a trace may
span lines and files), then each trace is assembled once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from schemas.events import ConversationFinished, DeadLetter, SessionPersisted
from schemas.scenario import Scenario
from services.kafka.delivery import DeliveryReport
from services.otlp.decode import PayloadError, read_file
from services.otlp.dropped import trace_letter
from services.otlp.mapping import (
    Skipped,
    Span,
    Taken,
    assemble,
    by_trace,
    spans_of,
    with_probed_session,
)


@dataclass
class ImportPlan:
    taken: list[Taken] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    bad_lines: list[tuple[str, str]] = field(default_factory=list)  # where, why
    spans: int = 0
    probed: int = 0  # sessions a state probe found
    not_probed: list[tuple[str, str]] = field(default_factory=list)  # trial, why
    letters: list[DeadLetter] = field(default_factory=list)  # one per skipped trace


def plan_import(
    files: Iterable[Path],
    on_trace: Callable[[int, int], None] | None = None,
    scenarios: Iterable[Scenario] | None = None,
) -> ImportPlan:
    """`scenarios`: the published ones, whose `match` rules take traces with no passk ids
    (None: such traces are skipped as no_passk_ids)."""
    plan = ImportPlan()
    spans: list[Span] = []
    for path in files:
        for where, request in read_file(path):
            if isinstance(request, PayloadError):
                plan.bad_lines.append((where, str(request)))
                continue
            spans.extend(spans_of(request))
    plan.spans = len(spans)
    traces = by_trace(spans)
    rules = list(scenarios) if scenarios is not None else None
    for i, trace in enumerate(traces.values(), 1):
        result = assemble(trace, rules)
        if isinstance(result, Taken):
            plan.taken.append(result)
        else:
            plan.skipped.append(result)
            plan.letters.append(
                trace_letter(
                    result.trace_id,
                    result.reason,
                    result.detail[:500],
                    trace,
                    processor="import-otel",
                )
            )
        if on_trace:
            on_trace(i, len(traces))
    return plan


class Probe(Protocol):
    async def find(self, session_id: str) -> tuple[Any, str | None]: ...

    async def close(self) -> None: ...


async def probe_sessions(
    plan: ImportPlan, probe: Probe, concurrency: int = 8, on_trial: Callable[[], None] | None = None
) -> None:
    """Ask the product's state probe for the session of every taken trial whose trace
    carried none (the harness's probe: found -> `.state`, `.exit_reason`)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, taken: Taken) -> None:
        async with gate:
            found, why = await probe.find(taken.conversation.session_id)
        if found is None:
            plan.not_probed.append((taken.conversation.trial_id, why or "not found"))
        else:
            plan.taken[i] = with_probed_session(taken, found.state, found.exit_reason)
            plan.probed += 1
        if on_trial:
            on_trial()

    await asyncio.gather(*(one(i, t) for i, t in enumerate(plan.taken) if t.session is None))


class Sender(Protocol):
    """What publishing needs of a producer; TrafficProducer is one."""

    def send(
        self, event: ConversationFinished | SessionPersisted, *, ref: str | None = None
    ) -> Any: ...

    def settle(self, timeout_s: float | None = None) -> bool: ...

    def report(self) -> DeliveryReport: ...


@dataclass
class Published:
    acknowledged: int = 0  # events
    undelivered: list[str] = field(default_factory=list)  # trial ids, first sent first
    reasons: dict[str, str] = field(default_factory=dict)  # trial id -> why (its first)
    interrupted: bool = False  # stopped (SIGINT) before every trial was sent


def publish_plan(
    plan: ImportPlan,
    sender: Sender,
    *,
    on_event: Callable[[], None] | None = None,
    settle_timeout_s: float | None = None,
    stop_grace_s: float = 10.0,
) -> Published:
    """Send every taken trial's events, then wait for the broker's acknowledgements (at
    most `settle_timeout_s`, default the sender's deadline). A trial is delivered when all
    its events are. SIGINT stops the sending and waits at most `stop_grace_s` for what
    was sent (a second SIGINT: not at all). Event ids come from the trace, so importing
    the same files again sends the rest and the pipeline drops the repeats."""
    out = Published()
    try:
        for taken in plan.taken:
            trial = taken.conversation.trial_id
            for event in (taken.conversation, taken.session):
                if event is not None:
                    sender.send(event, ref=trial)
                    if on_event is not None:
                        on_event()
    except KeyboardInterrupt:
        out.interrupted = True
    try:
        sender.settle(stop_grace_s if out.interrupted else settle_timeout_s)
    except KeyboardInterrupt:
        out.interrupted = True
    report = sender.report()
    out.acknowledged = report.delivered
    for undelivered in report.undelivered:
        if undelivered.ref not in out.reasons:
            out.undelivered.append(undelivered.ref)
            out.reasons[undelivered.ref] = undelivered.why
    return out
