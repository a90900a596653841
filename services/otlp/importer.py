"""`passk import otel`: OTLP files to trials. Every file is read whole first (a trace may
span lines and files), then each trace is assembled once."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from services.otlp.decode import PayloadError, read_file
from services.otlp.mapping import Skipped, Span, Taken, assemble, by_trace, spans_of


@dataclass
class ImportPlan:
    taken: list[Taken] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    bad_lines: list[tuple[str, str]] = field(default_factory=list)  # where, why
    spans: int = 0


def plan_import(files: Iterable[Path], on_trace: Callable[[int, int], None] | None = None
                ) -> ImportPlan:
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
    for i, trace in enumerate(traces.values(), 1):
        result = assemble(trace)
        (plan.taken if isinstance(result, Taken) else plan.skipped).append(result)  # type: ignore[arg-type]
        if on_trace:
            on_trace(i, len(traces))
    return plan
