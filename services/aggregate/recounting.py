"""`passk aggregate recount`'s work (and `passk audit --repair`'s, services/cli/wiring.py):
with the aggregate paused, its table recounted from the verdict log (`recount`, pure), the
differences written and their figures published; what moved, as a value."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from services.contract.settings import Settings

Paused = Callable[[str, Settings], AbstractContextManager[None]]
Progress = Callable[[str, int, int | None], None]  # (step, done, total)


@dataclass
class Recounted:
    verdicts: int  # trials whose newest verdict was counted
    writes: int  # table keys written or deleted
    scopes: list[dict[str, Any]] = field(default_factory=list)  # the scopes whose counts moved

    def as_json(self) -> dict[str, Any]:
        return {
            "verdicts": self.verdicts,
            "writes": self.writes,
            "recounted_scopes": len(self.scopes),
            "scopes": self.scopes,
        }


def recount_aggregate(
    settings: Settings, scenarios: set[str] | None, paused: Paused, progress: Progress | None = None
) -> Recounted:
    """With the aggregate stopped: its table recounted from each trial's newest verdict on
    the log, the differences written to its changelog and their figures published. A
    restarted aggregate recovers the recounted table and reads on from its committed
    offsets: verdicts it reads again are already remembered (repeats), newer ones count."""
    from services.aggregate import domain
    from services.aggregate.recount import changed_scopes, corrections, recount, recounted_buckets
    from services.aggregate.table import (
        read_table,
        read_verdicts,
        scenario_partitioner,
        write_corrections,
    )
    from services.grading.windows import parse_windows
    from services.kafka.catalog import read_catalog

    def tell(step: str) -> Callable[[int, int], None]:
        return lambda done, total: progress(step, done, total) if progress else None

    config = domain.Config(
        sizes=parse_windows(settings.windows),
        retention_s=settings.dedup_retention_s,
        max_skew_s=settings.max_clock_skew_s,
    )
    catalog = read_catalog(settings).latest()

    def target(scenario_id: str) -> tuple[float, int]:
        alert = catalog[scenario_id].alert if scenario_id in catalog else None
        return (
            alert.min_pass_hat_k
            if alert and alert.min_pass_hat_k is not None
            else settings.alert_min_pass_hat_k,
            alert.min_trials
            if alert and alert.min_trials is not None
            else settings.alert_min_trials,
        )

    with paused("aggregate", settings):
        partition_of = scenario_partitioner(settings)
        old = read_table(settings, tell("reading the aggregate's table"))
        verdicts, _ = read_verdicts(settings, scenarios, tell("reading the verdicts"))
        new = recount(verdicts, config, partition_of)
        writes = corrections(old, new, scenarios, partition_of)
        buckets = recounted_buckets(writes)
        moved = changed_scopes(old, writes)
        write_corrections(settings, writes, buckets, target)
    scopes = []
    for bucket in buckets:
        before = old.get(_key(bucket))
        counts = (bucket.passed, bucket.failed, bucket.errors)
        was = (
            (before["passed"], before["failed"], before["errors"])
            if isinstance(before, dict)
            else None
        )
        if was != counts:
            scopes.append(
                {
                    "scenario_id": bucket.scenario_id,
                    "scope": "run" if bucket.window is None else bucket.window,
                    "run_id": bucket.run_id,
                    "window_start": bucket.window_start,
                    "before": _counts(was),
                    "after": _counts(counts),
                }
            )
    assert len(scopes) == moved
    return Recounted(verdicts=len(verdicts), writes=len(writes), scopes=scopes)


def _key(bucket: Any) -> str:
    from services.aggregate import domain

    if bucket.window is None:
        return domain.run_key(bucket.scenario_id, bucket.run_id)
    return domain.window_key(bucket.scenario_id, bucket.window, bucket.window_start)


def _counts(counts: tuple[int, int, int] | None) -> dict[str, int] | None:
    if counts is None:
        return None
    return dict(zip(("passed", "failed", "errors"), counts, strict=True))
