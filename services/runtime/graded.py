"""The memory of graded trials, on disk: a Faust table on the RocksDB store (rocksdict).

The gate and the verdict remember every trial they graded for PASSK_DEDUP_RETENTION_S
(7 days) to drop its repeats: at 100 trials/s that is 60 million markers, too many for
RAM. They live in their own table whose store is RocksDB, one database per partition
under the worker's data directory, so RAM holds only RocksDB's bounded buffers; the
in-memory tables keep the trials still pending, which is what the deadline ticker scans.

Nothing scans the markers to expire them:
- RocksDB drops a marker older than the retention when it compacts (its TTL mode);
- the changelog is `compact,delete` with the same retention, so the broker drops old
  markers too and a worker recovering on a new machine reads a week, not the whole log;
- a marker read back that is older than the retention (RocksDB keeps an expired entry
  until it compacts it, and a marker recovered from the changelog gets a fresh TTL
  clock) counts as absent (`fresh`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import faust
from pydantic import BaseModel

from services.contract.settings import Settings
from services.contract.topics import dedup_retained_config
from services.runtime.faust_compat import on_disk_table
from services.runtime.ticks import StateTable, table_value

# Per partition database (8 partitions by default): at most two write buffers of 4 MiB
# and a 4 MiB block cache, so the markers cost at most ~12 MiB of RAM per partition held
# whatever the retention. Faust's defaults (64 MiB x 3 buffers and a 2 GiB cache each)
# suit a dedicated state store, not six workers on one small machine.
ROCKSDB_OPTIONS: dict[str, Any] = {
    "write_buffer_size": 4 * 1024 * 1024,
    "max_write_buffer_number": 2,
    "block_cache_size": 4 * 1024 * 1024,
    "target_file_size_base": 16 * 1024 * 1024,
}


def graded_table(app: faust.App, name: str, settings: Settings) -> StateTable:
    """A changelogged table of graded-trial markers on RocksDB, expired by TTL."""
    retention_s = settings.dedup_retention_s
    # on RocksDB while the app's other tables stay in memory (faust_compat says why)
    table = on_disk_table(
        app,
        name=name,
        default=None,
        beacon=app.tables.beacon,
        partitions=settings.topic_partitions,
        options={**ROCKSDB_OPTIONS, "ttl": max(1, int(retention_s))},
        extra_topic_configs=dedup_retained_config(settings),
    )
    app.tables.add(table)
    return table


def fresh(marked_at: float | None, now: float, retention_s: float) -> bool:
    """Whether a marker set at `marked_at` is still within the retention at `now`."""
    return marked_at is not None and now - marked_at < retention_s


class KeyedStates:
    """A processor's state per key: pending in a RAM table (and the deadline heap), graded
    in the RocksDB table. Values are `ticks.table_value(state, due_at)`; a value with no
    due time whose `marked_at(state)` is set is a marker."""

    def __init__(
        self,
        pending: StateTable,
        graded: StateTable,
        schedule: Callable[[str, float | None], None],
        marked_at: Callable[[dict[str, Any]], float | None],
        retention_s: float,
        is_marker: Callable[[Any], bool] = lambda state: False,
        due_at: Callable[[Any], float | None] = lambda state: None,
        on_pending: Callable[[str, Any], None] = lambda key, state: None,
    ) -> None:
        self.pending = pending
        self.graded = graded
        self.schedule = schedule
        self.marked_at = marked_at
        self.retention_s = retention_s
        self.is_marker = is_marker
        self.due_at = due_at
        # told each key's state as it is written: the pending state, or None once the key
        # is graded or forgotten (the join's flow control counts what is pending)
        self.on_pending = on_pending

    def store(self, key: str, state: BaseModel | None) -> None:
        """Write a state model (None: forget the key): a marker has no due time."""
        if state is None:
            self.on_pending(key, None)
            return self.apply(key, None)
        marker = self.is_marker(state)
        self.on_pending(key, None if marker else state)
        due = None if marker else self.due_at(state)
        self.apply(key, table_value(state.model_dump(mode="json"), due))

    def read(self, key: str) -> dict[str, Any] | None:
        value = self.pending.get(key)
        if value is not None:
            return value
        marker = self.graded.get(key)
        if marker is None or not fresh(
            self.marked_at(marker["state"]), time.time(), self.retention_s
        ):
            return None
        return marker

    def apply(self, key: str, value: dict[str, Any] | None) -> None:
        """Write a key's state (None: forget it); a graded trial leaves the pending table."""
        if value is None:
            self.pending.pop(key, None)
            self.schedule(key, None)
        elif value["due_at"] is None and self.marked_at(value["state"]) is not None:
            self.graded[key] = value
            self.pending.pop(key, None)
            self.schedule(key, None)
        else:
            self.pending[key] = value
            self.schedule(key, value["due_at"])
