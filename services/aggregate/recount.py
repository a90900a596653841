"""Recounting the aggregate's table from the verdict log: pure, no Kafka.

`recount` feeds each trial's newest verdict, oldest event time first, through the same
`domain.apply` the live aggregate uses, into a table of its own: what the aggregate would
hold had nothing been lost. `corrections` turns that into the writes that make the live
table equal it, for the scenarios recounted: every key of theirs rewritten, the keys the
recount does not hold deleted. A bucket's sequence number carries on from the old one (old
+ recount's), and each trial memory's numbers with it, so the figures published for the
new counts have event ids never used before and a verdict read again finishes nothing.

`TableView` reads the table the way the audit asks (services/audit/domain.AggregateTable).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from schemas.events import TrialVerdict
from services.aggregate import domain
from services.grading.windows import scope_key

Table = dict[str, Any]


def scenario_of(key: str) -> str | None:
    """The scenario a table key belongs to (None for a partition's clock)."""
    kind, _, rest = key.partition("|")
    if kind not in ("t", "b", "l"):
        return None
    return rest.split("|", 1)[0]


def bucket_scope(bucket: dict[str, Any]) -> str:
    if bucket.get("window") is None:
        return scope_key("run", bucket.get("run_id"), None)
    return scope_key(str(bucket["window"]), None, int(bucket["window_start"]))


class Keyed(Protocol):
    """A table to read: a dict, or the changelog copied to disk (table.DiskTable)."""

    def get(self, key: str) -> Any: ...

    def buckets(self) -> Iterable[tuple[str, Any]]: ...


class InMemory(dict[str, Any]):
    def buckets(self) -> Iterator[tuple[str, Any]]:
        return ((k, v) for k, v in self.items() if k.startswith("b|"))


class TableView:
    """The aggregate's table as the audit reads it: which scopes a trial's change landed in
    (a memory numbers each change; the bucket holds it when its number reached that), and
    every bucket's counts."""

    def __init__(self, table: Keyed | Table) -> None:
        self.table: Keyed = table if hasattr(table, "buckets") else InMemory(table)

    def trial(self, scenario_id: str, trial_id: str) -> tuple[int, str, frozenset[str]] | None:
        memory = self.table.get(domain.trial_key(scenario_id, trial_id))
        if not isinstance(memory, dict):
            return None
        landed = set()
        for key, seq in (memory.get("seqs") or {}).items():
            bucket = self.table.get(key)
            if isinstance(bucket, dict) and bucket.get("seq", 0) >= seq:
                landed.add(bucket_scope(bucket))
        return int(memory["attempt"]), str(memory["outcome"]), frozenset(landed)

    def scopes(self) -> Iterator[tuple[str, str, int, int, int]]:
        for _, bucket in self.table.buckets():
            if isinstance(bucket, dict):
                yield (
                    bucket["scenario_id"],
                    bucket_scope(bucket),
                    bucket["passed"],
                    bucket["failed"],
                    bucket["errors"],
                )


def recount(
    verdicts: Iterable[tuple[TrialVerdict, float]],
    config: domain.Config,
    partition_of: Callable[[str], int],
) -> Table:
    """The table the aggregate would hold after counting `verdicts` (each trial's newest,
    oldest event time first, with when the log took it: the wall clock the aggregate
    bounded its event time by), with expired state swept as the live one sweeps it."""
    table: Table = {}
    for verdict, now in verdicts:
        partition = partition_of(verdict.scenario_id)
        step = domain.apply(table.get, verdict, partition, config, now=now)
        for key, value in step.writes:
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        if step.sweep:
            clock = domain.partition_clock(
                table.get(domain.clock_key(partition)), domain.ceiling(config, now)
            )
            if clock is not None:
                keys, _ = domain.expired(
                    list(table.items()), partition, clock.watermark, config, now
                )
                for key in keys:
                    table.pop(key, None)
                table[domain.clock_key(partition)] = domain.swept(clock.watermark)
    return table


@dataclass(frozen=True)
class Correction:
    key: str
    value: dict[str, Any] | None  # None: delete the key
    partition: int  # the table partition (of the scenario) the write belongs to


def corrections(
    old: Table, new: Table, scenarios: set[str] | None, partition_of: Callable[[str], int]
) -> list[Correction]:
    """The writes that make `old` hold `new` for `scenarios` (None: every scenario in
    either), in the order the aggregate's own writes go: memories, buckets, latest
    windows, clocks. Keys already equal are not written."""

    def ours(key: str) -> bool:
        scenario = scenario_of(key)
        return scenario is not None and (scenarios is None or scenario in scenarios)

    base = {
        key: int(value.get("seq", 0))
        for key, value in old.items()
        if key.startswith("b|") and isinstance(value, dict) and ours(key)
    }
    out: list[Correction] = []
    for key in sorted(k for k in new if ours(k)):
        value = dict(new[key])
        if key.startswith("b|"):
            value["seq"] = base.get(key, 0) + int(value.get("seq", 0))
        elif key.startswith("t|"):
            value["seqs"] = {b: base.get(b, 0) + s for b, s in (value.get("seqs") or {}).items()}
        if old.get(key) != value:
            out.append(Correction(key, value, int(value["partition"])))
    for key in sorted(k for k in old if ours(k) and k not in new):
        scenario = scenario_of(key)
        assert scenario is not None
        partition = (old[key] or {}).get("partition") if isinstance(old[key], dict) else None
        out.append(
            Correction(key, None, partition_of(scenario) if partition is None else int(partition))
        )
    for key, value in new.items():
        if key.startswith("p|") and isinstance(value, dict):
            held = old.get(key)
            if not isinstance(held, dict) or held.get("watermark", 0) < value["watermark"]:
                out.append(Correction(key, value, int(key[2:])))
    order = {"t|": 0, "b|": 1, "l|": 2, "p|": 3}
    return sorted(out, key=lambda c: order.get(c.key[:2], 4))


def recounted_buckets(writes: Iterable[Correction]) -> list[domain.Bucket]:
    """The buckets the corrections write: their figures are to be published."""
    return [
        domain.Bucket.model_validate(c.value)
        for c in writes
        if c.key.startswith("b|") and c.value is not None
    ]


def changed_scopes(old: Table, writes: Iterable[Correction]) -> int:
    """How many scopes' counts the corrections change (not merely renumber)."""

    def counts(value: Any) -> tuple[int, int, int] | None:
        if not isinstance(value, dict):
            return None
        return value["passed"], value["failed"], value["errors"]

    return sum(
        1 for c in writes if c.key.startswith("b|") and counts(c.value) != counts(old.get(c.key))
    )
