"""`passk aggregate recount [--scenario S]`: rebuild the aggregate's counts from the verdict
log (what replaced the by-hand reset of its table with Kafka's tools)."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import typer

from services.clikit import BROKER_WAIT
from services.contract.settings import Settings

# Imports inside functions here are deferred: every command module loads on each `passk` run.

Paused = Callable[[str, Settings], AbstractContextManager[None]]
Progress = Callable[[str, int, int | None], None]  # (step, done, total)


@dataclass
class Recounted:
    verdicts: int  # trials whose newest verdict was counted
    writes: int  # table keys written or deleted
    scopes: list[dict[str, Any]] = field(default_factory=list)  # the scopes whose counts moved

    def as_json(self) -> dict[str, Any]:
        return {"verdicts": self.verdicts, "writes": self.writes,
                "recounted_scopes": len(self.scopes), "scopes": self.scopes}


def recount_aggregate(settings: Settings, scenarios: set[str] | None, paused: Paused,
                      progress: Progress | None = None) -> Recounted:
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

    config = domain.Config(sizes=parse_windows(settings.windows),
                           retention_s=settings.dedup_retention_s,
                           max_skew_s=settings.max_clock_skew_s)
    catalog = read_catalog(settings).latest()

    def target(scenario_id: str) -> tuple[float, int]:
        alert = catalog[scenario_id].alert if scenario_id in catalog else None
        return (alert.min_pass_hat_k if alert and alert.min_pass_hat_k is not None
                else settings.alert_min_pass_hat_k,
                alert.min_trials if alert and alert.min_trials is not None
                else settings.alert_min_trials)

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
        was = (before["passed"], before["failed"], before["errors"]) if isinstance(
            before, dict) else None
        if was != counts:
            scopes.append({"scenario_id": bucket.scenario_id,
                           "scope": "run" if bucket.window is None else bucket.window,
                           "run_id": bucket.run_id, "window_start": bucket.window_start,
                           "before": _counts(was), "after": _counts(counts)})
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


def register(app: typer.Typer, *, paused: Paused) -> None:
    aggregate = typer.Typer(help="The aggregate's counts: recount them from the verdict log.",
                            no_args_is_help=True, rich_markup_mode=None)
    app.add_typer(aggregate, name="aggregate")

    @aggregate.command()
    def recount(
        scenario: list[str] = typer.Option(
            None, "--scenario", help="only this scenario (repeatable); default every one"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Rebuild the aggregate's run and window counts from the verdict log: stops the
        aggregate (under `make up`; otherwise its workers must be stopped first, exit 2),
        recounts each trial's newest verdict as the aggregate counts it, writes what differs
        to its table's changelog, publishes the new figures and starts it again. Exit 0."""
        from rich.table import Table

        from services.clikit import console as make_console
        from services.contract.settings import get_settings
        from services.contract.terminal import literal
        from services.kafka.reach import require_broker

        settings = get_settings()
        require_broker(wait, settings)
        err = make_console(stderr=True)
        result = recount_aggregate(settings, set(scenario) if scenario else None, paused,
                                   lambda step, done, total: err.print(
                                       f"{step}: {done}/{total}", end="\r"))
        if as_json:
            typer.echo(json.dumps(result.as_json()))
            return
        table = Table("scenario", "scope", "before (passed/failed/errors)", "after",
                      title=f"recounted {result.verdicts} trials: {len(result.scopes)} scopes "
                            f"changed, {result.writes} table writes")
        for s in result.scopes:
            where = f"run {s['run_id']}" if s["scope"] == "run" else (
                f"{s['scope']} @ {s['window_start']}")
            before = s["before"]
            table.add_row(literal(s["scenario_id"]), literal(where),
                          "/".join(str(v) for v in before.values()) if before else "(none)",
                          "/".join(str(v) for v in s["after"].values()))
        make_console().print(table)
