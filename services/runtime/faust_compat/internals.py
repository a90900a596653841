"""Named access to the faust-streaming 0.15.3 internals passk relies on (docs/faust.md,
"Private access"). Nothing else in passk reads or writes a private faust name."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Set
from contextlib import contextmanager
from typing import Any

import faust
from faust import streams as faust_streams
from faust.types import TP

# --- the event being processed ------------------------------------------------------


def current_event() -> faust.types.EventT[Any] | None:
    """The event being processed (None outside one): Faust writes a table's changelog to
    its partition, and the RocksDB store picks its partition's database by it."""
    return faust_streams.current_event()


@contextmanager
def as_current_event(event: faust.types.EventT[Any]) -> Iterator[None]:
    """Make `event` the one being processed, as Faust does inside `stream.events()`:
    code that handles a batch (`take_events`) runs with no current event otherwise."""
    token = faust_streams._current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        faust_streams._current_event.reset(token)


# --- what a worker's consumer is doing, for an operator -------------------------------


def consumer_state(app: faust.App) -> str:
    """The consumer's view of its partitions, for a worker that is up and does not read:
    whether the flow runs and the app is recovering, what is assigned, what is active
    (fetched and handed out), paused or buffered, and each partition's read and committed
    offset. Read from another thread's objects without a lock: a snapshot to look at."""
    consumer: Any = app.consumer  # the transport's Consumer, beyond the ConsumerT protocol
    tables: Any = app.tables
    parts: dict[str, Any] = {}
    for name, read in (
        ("flow_active", lambda: consumer.flow_active),
        ("in_recovery", lambda: app.in_recovery),
        ("recovery_in_progress", lambda: tables.recovery.in_recovery),
        ("assigned", lambda: _by_topic(consumer.assignment())),
        ("active", lambda: _by_topic(consumer._active_partitions or ())),
        ("paused", lambda: _by_topic(consumer._paused_partitions)),
        ("buffered", lambda: _by_topic(consumer._buffered_partitions)),
        ("read_offset", lambda: _by_topic(consumer._read_offset)),
        ("committed", lambda: _by_topic(consumer._committed_offset)),
        ("client", lambda: client_partitions(consumer)),
        ("client_buffered", lambda: _by_topic(_client(consumer)._fetcher._records)),
    ):
        try:
            parts[name] = read()
        except Exception as exc:  # a snapshot shows what it cannot read
            parts[name] = f"(unreadable: {type(exc).__name__}: {exc})"
    return "\n".join(f"  {name}: {value}" for name, value in parts.items())


def _client(consumer: Any) -> Any:
    """The aiokafka consumer under Faust's (in its own thread)."""
    return consumer._thread._ensure_consumer()


def client_partitions(consumer: Any) -> dict[str, Any]:
    """The aiokafka client's own state of each assigned partition, which decides what it
    fetches and can differ from Faust's view: paused, status (awaiting a reset, consuming)
    and position. A partition Faust calls active that the client has paused, or left
    awaiting a position, is never fetched."""
    assignment = _client(consumer)._subscription.subscription.assignment
    states = {}
    for tp in assignment.tps:
        state = assignment.state_value(tp)
        states[tp] = (
            f"{'paused ' if state.paused else ''}{state._status.name.lower()} at {state._position}"
        )
    return _by_topic(states)


def _by_topic(tps: Any) -> dict[str, Any]:
    """Partitions (or a partition -> offset map) grouped by topic: {topic: [0, 1]} or
    {topic: {0: offset}}."""
    grouped: dict[str, Any] = {}
    for tp in sorted(tps):
        if isinstance(tps, dict):
            grouped.setdefault(tp.topic, {})[tp.partition] = tps[tp]
        else:
            grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


# --- pausing a partition without dropping what was fetched --------------------------


def paused_partitions(consumer: Any) -> Set[TP]:
    """What faust's consumer holds paused now (it resumes every partition after a
    rebalance's recovery, so this is the truth, not what passk last paused)."""
    return consumer._paused_partitions


def pause_keeping_fetched(consumer: Any, tp: TP) -> None:
    """Stop fetching `tp` but hand out the records already fetched of it: Faust's getmany
    yields a partition's fetched records only while it is active or "buffered"; paused
    alone, the rest of the batch being handed out is dropped and Faust commits past it
    as a gap."""
    consumer._buffered_partitions.add(tp)
    consumer.pause_partitions({tp})


def resume_paused(consumer: Any, tp: TP) -> None:
    forget_paused(consumer, tp)
    consumer.resume_partitions({tp})


def forget_paused(consumer: Any, tp: TP) -> None:
    """Drop the "buffered" mark of a partition Faust resumed or revoked by itself."""
    consumer._buffered_partitions.discard(tp)


# --- a table on RocksDB while the app's other tables stay in memory -----------------


class _OnDisk(faust.Table[Any, Any]):
    """`Table(store="rocksdb://")` does not do it in faust-streaming 0.15.3: yarl's
    URL("rocksdb://") is falsy (no host, no path), so the table falls back to the app's
    store, silently in memory. The store is therefore named where it is built."""

    def _new_store(self) -> Any:
        return self._new_store_by_url("rocksdb://")


def on_disk_table(app: faust.App, **options: Any) -> faust.types.TableT[Any, Any]:
    """A faust Table (not yet added to `app.tables`) whose store is RocksDB."""
    return _OnDisk(app, **options)


def new_store(table: faust.types.TableT[Any, Any]) -> Any:
    """The store faust builds for `table` (what `table.data` is once it is started)."""
    return table._new_store()  # type: ignore[attr-defined]


# --- after a table's recovery, in a declared order ----------------------------------

# What passk runs after a table's recovery from its changelog, in this order: the
# deadline ticker re-reads the keys restored (ticks.Deadlines), then the join's flow
# control drops the keys no longer held (flow.join_flow). Neither reads what the other
# writes; the order is declared so that it is not the order in which an app happened to
# build them. They run as one callback of faust's public `Table.on_recover`, after the
# store's own recovery: faust keeps those callbacks in a set, so several would run in
# no defined order.
RECOVERY_ORDER = ("deadlines", "join_flow")
_STEPS = "_passk_recovery_steps"  # on the table: step name -> callback


def on_recovery_completed(
    table: faust.types.TableT[Any, Any], step: str, callback: Callable[[], None]
) -> None:
    """Run `callback` after `table`'s recovery completes, at `step`'s place in
    RECOVERY_ORDER."""
    if step not in RECOVERY_ORDER:
        raise ValueError(f"unknown recovery step {step!r}; declare it in RECOVERY_ORDER")
    steps: dict[str, Callable[[], None]] | None = getattr(table, _STEPS, None)
    if steps is None:
        steps = {}
        setattr(table, _STEPS, steps)

        async def run_recovery_steps() -> None:
            for name in RECOVERY_ORDER:
                if name in steps:
                    steps[name]()

        table.on_recover(run_recovery_steps)
    if step in steps:
        raise ValueError(f"recovery step {step!r} is already set on table {table.name}")
    steps[step] = callback
