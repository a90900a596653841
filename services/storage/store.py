"""The SQL projection: trials, gate results, judge verdicts, transcripts, scenario summaries.

Every write is an upsert on the row's natural key that only replaces an equal-or-older
version (see the rule in `services.storage.records`), so redelivered and replayed events are
harmless. The tables live in their own metadata so `reset` never touches other tables
that share the database (the judge cache, say).
"""

from __future__ import annotations

import logging
import threading
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Index, Table, and_, case, func, inspect, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import registry
from sqlmodel import SQLModel

from services.grading.estimators import ReliabilityTally
from services.storage.db import engine_for
from services.storage.records import (
    OUTCOMES,
    Counted,
    GateRecord,
    Home,
    JudgeRecord,
    Record,
    ScenarioSummary,
    SinkEvent,
    SummaryDeltas,
    TranscriptRecord,
    TrialAttemptRecord,
    TrialRecord,
    WindowRecord,
    as_utc,
    records_for,
    summary_of,
)

log = logging.getLogger(__name__)


class SinkTable(SQLModel, registry=registry()):
    """Base of the projection's tables; its own metadata, apart from any other tables."""


@dataclass(frozen=True)
class Stored:
    """One table of the projection: its columns are its record type's, `version` orders
    the versions of one key, and `identity` names the columns that say which trial a row
    of a trial id belongs to."""

    table: Table
    version: str
    identity: tuple[str, ...] = ()


def _stored(
    record: type[SQLModel],
    name: str,
    *,
    version: str,
    identity: tuple[str, ...] = (),
    args: tuple[Any, ...] = (),
) -> Stored:
    """The table `name` of `record`'s rows (a table model of its columns, in SinkTable's
    metadata)."""
    namespace = {"__module__": __name__, "__tablename__": name, "__table_args__": args}
    row = types.new_class(
        f"{record.__name__}Row",
        (record, SinkTable),
        {"table": True},
        lambda body: body.update(namespace),
    )
    return Stored(row.__table__, version, identity)  # type: ignore[attr-defined]


# A row whose identity differs from the stored one is another trial reusing the id (the
# verdict dead-letters it as trial_id_conflict): it never replaces what the graded trial
# was computed from. Judge rows carry no session, so only run and scenario are compared.
TABLES: dict[type[SQLModel], Stored] = {
    TrialRecord: _stored(
        TrialRecord,
        "trials",
        version="verdict_at",
        # A summary's newest trial (its k) is one index probe, however many trials it has.
        args=(Index("ix_trials_latest", "run_id", "scenario_id", "verdict_at", "trial_id"),),
    ),
    TrialAttemptRecord: _stored(TrialAttemptRecord, "trial_attempts", version="verdict_at"),
    GateRecord: _stored(
        GateRecord,
        "gate_results",
        version="occurred_at",
        identity=("run_id", "scenario_id", "session_id"),
    ),
    JudgeRecord: _stored(
        JudgeRecord, "judge_verdicts", version="occurred_at", identity=("run_id", "scenario_id")
    ),
    TranscriptRecord: _stored(
        TranscriptRecord,
        "transcripts",
        version="occurred_at",
        identity=("run_id", "scenario_id", "session_id"),
    ),
    ScenarioSummary: _stored(ScenarioSummary, "scenario_summaries", version="last_verdict_at"),
    WindowRecord: _stored(WindowRecord, "scenario_windows", version="seq"),
}
TRIALS = TABLES[TrialRecord].table
METADATA = SinkTable.metadata
# Columns of `trials` added after projections existed; create_schema adds them, each
# nullable or with its model default, which is what every older trial was.
ADDED_COLUMNS = ("advisory_checks", "exit_source", "completion")
# Columns of the figure tables added since (`invalid`: trials the simulated user spoiled).
ADDED_FIGURE_COLUMNS: tuple[tuple[type[Any], str], ...] = (
    (ScenarioSummary, "invalid"),
    (WindowRecord, "invalid"),
)
# Production traffic: a window's sampled counts (nullable: an old row had every trial sampled).
ADDED_WINDOW_COLUMNS = ("n_sampled", "passed_sampled", "errors_sampled")


def _newest_windows(rows: list[Any]) -> list[Any]:
    """A window's records of one batch reduced to its newest (highest seq; the later in log
    order among equals): one statement may not update a row twice in PostgreSQL."""
    newest: dict[tuple[str, str, Any], Any] = {}
    for row in rows:
        key = (row.scenario_id, row.window, row.window_start)
        if key not in newest or row.seq >= newest[key].seq:
            newest[key] = row
    return list(newest.values())


class Store:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = engine_for(url)
        self._dialect = self.engine.dialect.name
        if self._dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported database {self._dialect!r} (use sqlite or postgresql)")
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._present: set[str] | None = None  # the trials table's columns, once read
        self._told_missing = False

    # ------------------------------------------------------------------ schema

    def create_schema(self) -> None:
        """Create the tables that do not exist yet (idempotent, safe across processes)."""
        with self._schema_lock:
            if self._schema_ready:
                return
            try:
                METADATA.create_all(self.engine)
            except Exception:
                # Another worker created them between our check and our CREATE; look again.
                METADATA.create_all(self.engine)
            # A projection made before the index existed gets it too (create_all only
            # indexes the tables it creates).
            latest = next(i for i in TRIALS.indexes if i.name == "ix_trials_latest")
            try:
                latest.create(self.engine, checkfirst=True)
            except Exception:
                latest.create(self.engine, checkfirst=True)
            self._add_columns()
            self._schema_ready = True

    def _add_columns(self) -> None:
        """Columns added to the projection since its tables were first made: create_all
        never alters a table that exists. A nullable one leaves old rows NULL (read as its
        default); one that is not takes its model default in every old row (a trial
        projected before `completion` existed was graded with its state gate: "product")."""
        added = [(TrialRecord, name) for name in ADDED_COLUMNS] + list(ADDED_FIGURE_COLUMNS)
        for model, name in added:
            table = TABLES[model].table
            if name in self._columns(table.name):
                continue
            column = table.c[name]
            kind = column.type.compile(dialect=self.engine.dialect)
            if not column.nullable:
                default = literal(model.model_fields[name].default).compile(
                    dialect=self.engine.dialect, compile_kwargs={"literal_binds": True}
                )
                kind += f" NOT NULL DEFAULT {default}"
            try:
                with self.engine.begin() as conn:
                    conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {name} {kind}")
            except Exception:
                # Another worker added it first; anything else is still missing and says so.
                if name not in self._columns(table.name):
                    raise
        windows = TABLES[WindowRecord].table
        for name in ADDED_WINDOW_COLUMNS:
            if name in self._columns(windows.name):
                continue
            kind = windows.c[name].type.compile(dialect=self.engine.dialect)
            try:
                with self.engine.begin() as conn:
                    conn.exec_driver_sql(f"ALTER TABLE {windows.name} ADD COLUMN {name} {kind}")
            except Exception:
                if name not in self._columns(windows.name):
                    raise
        self._present = None

    def _columns(self, table: str, conn: Connection | None = None) -> set[str]:
        return {c["name"] for c in inspect(conn or self.engine).get_columns(table)}

    def _trial_columns(self, conn: Connection) -> list[Any]:
        """The trials table's columns this database has: a projection not yet given a
        newer column (no sink has started on it since) is still read, the column's
        default standing in."""
        table = TRIALS
        if self._present is None:
            self._present = self._columns(table.name, conn)
        return [c for c in table.c if c.name in self._present]

    def reset(self) -> None:
        """A fresh, empty projection: drop the projection's tables and create them again."""
        with self._schema_lock:
            METADATA.drop_all(self.engine)
            METADATA.create_all(self.engine)
            self._present = None
            self._schema_ready = True

    def has_schema(self) -> bool:
        """Every table of the projection exists: while a sink is creating them (one by one),
        a reader sees no schema rather than a table missing halfway through a query."""
        names = set(inspect(self.engine).get_table_names())
        missing = [t.name for t in METADATA.sorted_tables if t.name not in names]
        if missing and TRIALS.name in names and not self._told_missing:
            # Seen for the moment a sink takes to create them, or for good on a projection
            # made before these tables existed: said once, so an operator reading an old
            # projection learns why it is empty.
            self._told_missing = True
            log.warning(
                "the projection at %s has no table %s yet: it reads as empty until "
                "a sink (make up, passk worker sink) or passk rebuild creates it",
                self.engine.url.render_as_string(hide_password=True),
                ", ".join(missing),
            )
        return not missing

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ writes

    def apply(self, event: SinkEvent) -> None:
        self.apply_many([event])

    def apply_many(self, events: Iterable[SinkEvent], *, summaries: bool = True) -> int:
        """Store a batch in one transaction, summaries included.

        The cost is the batch's, not the run's: each touched summary's counts move by the
        batch's delta (see `SummaryDeltas`), and its k comes from the newest trial row
        through an index. `summaries=False` leaves them to `recompute_summaries` (rebuild).
        """
        self.create_schema()
        records = [record for event in events for record in records_for(event)]
        if not records:
            return 0
        trials = [r for r in records if isinstance(r, TrialRecord)]
        with self.engine.begin() as conn:
            deltas = SummaryDeltas(known=self._stored_trials(conn, trials)) if summaries else None
            by_table: dict[type[SQLModel], list[SQLModel]] = {}
            for record in records:
                if deltas is not None and isinstance(record, TrialRecord):
                    if not deltas.apply(record):
                        continue  # a stale copy: the upsert would ignore it anyway
                by_table.setdefault(type(record), []).append(record)
            if WindowRecord in by_table:
                by_table[WindowRecord] = _newest_windows(by_table[WindowRecord])
            for kind, rows in by_table.items():
                self._upsert_many(conn, kind, rows)
            if deltas is not None:
                for home in deltas.homes():
                    self._move_summary(conn, home, deltas.counts[home])
        return len(records)

    def _insert(self, table: Any) -> Any:
        return (postgresql if self._dialect == "postgresql" else sqlite).insert(table)

    def _upsert_many(self, conn: Connection, kind: type[SQLModel], records: list[SQLModel]) -> None:
        """One statement executed for many rows, in log order (a key seen twice in the
        batch ends as the rule says: equal-or-newer replaces)."""
        stored = TABLES[kind]
        table, version = stored.table, stored.version
        keys = [c.name for c in table.primary_key.columns]
        stmt = self._insert(table)
        same = [table.c[c] == stmt.excluded[c] for c in stored.identity]
        stmt = stmt.on_conflict_do_update(
            index_elements=keys,
            set_={c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys},
            where=and_(table.c[version] <= stmt.excluded[version], *same),
        )
        conn.execute(stmt, [r.model_dump() for r in records])

    def _stored_trials(self, conn: Connection, trials: list[TrialRecord]) -> dict[str, Counted]:
        """The stored rows of these trials (by primary key), as the summaries count them."""
        ids = sorted({t.trial_id for t in trials})
        table = TABLES[TrialRecord].table
        known: dict[str, Counted] = {}
        for chunk in (ids[i : i + 500] for i in range(0, len(ids), 500)):
            query = select(
                table.c.trial_id,
                table.c.run_id,
                table.c.scenario_id,
                table.c.outcome,
                table.c.verdict_at,
            ).where(table.c.trial_id.in_(chunk))
            for r in conn.execute(query):
                known[r.trial_id] = Counted(
                    (r.run_id, r.scenario_id), r.outcome, as_utc(r.verdict_at)
                )
        return known

    def _move_summary(self, conn: Connection, home: Home, delta: dict[str, int]) -> None:
        """Add the delta to a summary's counts (atomically: concurrent writers each add
        theirs under the row's lock), then set what follows from the counts."""
        run_id, scenario_id = home
        table = TABLES[ScenarioSummary].table
        where = (table.c.run_id == run_id, table.c.scenario_id == scenario_id)
        added = {
            "passed": delta["passed"],
            "failed": delta["failed"],
            "errors": delta["error"],
            "invalid": delta["invalid"],
        }
        stmt = self._insert(table).values(
            run_id=run_id,
            scenario_id=scenario_id,
            k=1,
            n=added["passed"] + added["failed"] + added["errors"],  # invalid trials: out of n
            scenario_passed=False,
            **added,
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "scenario_id"],
            set_={name: table.c[name] + stmt.excluded[name] for name in ("n", *added)},
        ).returning(table.c.passed, table.c.failed, table.c.errors, table.c.invalid)
        passed, failed, errors, invalid = conn.execute(stmt).one()
        latest = self._latest_trial(conn, run_id, scenario_id)
        if latest is None:  # its last trial moved to another run or scenario
            conn.execute(table.delete().where(*where))
            return
        k, last_verdict_at = latest
        tally = ReliabilityTally(k=k, passed=passed, failed=failed, errors=errors, invalid=invalid)
        summary = summary_of(run_id, scenario_id, tally, last_verdict_at)
        conn.execute(table.update().where(*where).values(**summary.model_dump()))

    def _latest_trial(self, conn: Connection, run_id: str, scenario_id: str) -> Any:
        """(k, verdict_at) of a summary's newest trial row, through the (run, scenario,
        verdict_at, trial_id) index: the same tie-break as `domain.summarize`."""
        t = TRIALS
        query = (
            select(t.c.k, t.c.verdict_at)
            .where(t.c.run_id == run_id, t.c.scenario_id == scenario_id)
            .order_by(t.c.verdict_at.desc(), t.c.trial_id.desc())
            .limit(1)
        )
        return conn.execute(query).first()

    def recompute_summaries(self) -> int:
        """Every summary recomputed from scratch from the trial rows (what `passk rebuild`
        does after loading the log): the yardstick the incremental counts must equal."""
        self.create_schema()
        t = TRIALS
        table = TABLES[ScenarioSummary].table
        counts = select(
            t.c.run_id,
            t.c.scenario_id,
            *(func.sum(case((t.c.outcome == o, 1), else_=0)).label(o) for o in OUTCOMES),
        ).group_by(t.c.run_id, t.c.scenario_id)
        with self.engine.begin() as conn:
            conn.execute(table.delete())
            homes = conn.execute(counts).all()
            for row in homes:
                k, last_verdict_at = self._latest_trial(conn, row.run_id, row.scenario_id)
                tally = ReliabilityTally(
                    k=k,
                    passed=int(row.passed),
                    failed=int(row.failed),
                    errors=int(row.error),
                    invalid=int(row.invalid),
                )
                summary = summary_of(row.run_id, row.scenario_id, tally, last_verdict_at)
                conn.execute(self._insert(table).values(**summary.model_dump()))
        return len(homes)

    # ----------------------------------------------------------------- queries

    def _trials(
        self, conn: Connection, run_id: str, scenario_id: str | None = None
    ) -> list[TrialRecord]:
        query = select(*self._trial_columns(conn)).where(TRIALS.c.run_id == run_id)
        if scenario_id is not None:
            query = query.where(TRIALS.c.scenario_id == scenario_id)
        table = TRIALS
        rows = conn.execute(query.order_by(table.c.scenario_id, table.c.trial_id))
        return [TrialRecord.model_validate(dict(r._mapping)) for r in rows]

    def _select(self, record: type[SQLModel], *where: Any, order: tuple[str, ...]) -> list[Any]:
        if not self.has_schema():
            return []
        table = TABLES[record].table
        query = select(table).where(*where).order_by(*(table.c[o] for o in order))
        with self.engine.connect() as conn:
            return [record.model_validate(dict(r._mapping)) for r in conn.execute(query)]

    def verdict_ids(self, run_id: str | None = None) -> Iterator[tuple[str, str]]:
        """(trial_id, event_id of the verdict its row holds) of every trial (of `run_id`),
        streamed: an audit of a week of trials holds none of them in memory."""
        if not self.has_schema():
            return
        query = select(TRIALS.c.trial_id, TRIALS.c.event_id)
        if run_id is not None:
            query = query.where(TRIALS.c.run_id == run_id)
        with self.engine.connect() as conn:
            result = conn.execution_options(yield_per=5000).execute(query)
            for row in result:
                yield row[0], row[1]

    def trials(self, run_id: str) -> list[TrialRecord]:
        if not self.has_schema():
            return []
        with self.engine.connect() as conn:
            return self._trials(conn, run_id)

    def recent_trials(self, limit: int) -> list[TrialRecord]:
        """The `limit` most recently graded trials of every run, newest first (the review
        queues' candidates)."""
        if not self.has_schema():
            return []
        t = TRIALS
        with self.engine.connect() as conn:
            query = (
                select(*self._trial_columns(conn))
                .order_by(t.c.verdict_at.desc(), t.c.trial_id.desc())
                .limit(limit)
            )
            return [TrialRecord.model_validate(dict(r._mapping)) for r in conn.execute(query)]

    def judges_of(self, trial_ids: Iterable[str]) -> list[JudgeRecord]:
        """The judge rows of these trials, by trial and judge."""
        table = TABLES[JudgeRecord].table
        ids = sorted(set(trial_ids))
        out: list[JudgeRecord] = []
        for chunk in (ids[i : i + 500] for i in range(0, len(ids), 500)):
            out += self._select(
                JudgeRecord, table.c.trial_id.in_(chunk), order=("trial_id", "judge_id")
            )
        return out

    def summaries(self, run_id: str) -> list[ScenarioSummary]:
        table = TABLES[ScenarioSummary].table
        return self._select(ScenarioSummary, table.c.run_id == run_id, order=("scenario_id",))

    def history(self, run_id: str) -> list[TrialAttemptRecord]:
        """Every grading attempt of the run's trials, by trial and attempt."""
        table = TABLES[TrialAttemptRecord].table
        return self._select(
            TrialAttemptRecord, table.c.run_id == run_id, order=("trial_id", "attempt")
        )

    def gate_results(self, run_id: str) -> list[GateRecord]:
        table = TABLES[GateRecord].table
        return self._select(GateRecord, table.c.run_id == run_id, order=("trial_id", "gate"))

    def judge_verdicts(self, run_id: str) -> list[JudgeRecord]:
        table = TABLES[JudgeRecord].table
        return self._select(JudgeRecord, table.c.run_id == run_id, order=("trial_id", "judge_id"))

    def trial(self, trial_id: str) -> TrialRecord | None:
        table = TABLES[TrialRecord].table
        found = self._select(TrialRecord, table.c.trial_id == trial_id, order=("trial_id",))
        return found[0] if found else None

    def trial_gates(self, trial_id: str) -> list[GateRecord]:
        table = TABLES[GateRecord].table
        return self._select(GateRecord, table.c.trial_id == trial_id, order=("gate",))

    def trial_judges(self, trial_id: str) -> list[JudgeRecord]:
        table = TABLES[JudgeRecord].table
        return self._select(JudgeRecord, table.c.trial_id == trial_id, order=("judge_id",))

    def transcripts(self, trial_ids: Iterable[str]) -> dict[str, TranscriptRecord]:
        """The kept conversations of these trials (those the sink has), by trial id."""
        table = TABLES[TranscriptRecord].table
        ids = sorted(set(trial_ids))
        out: dict[str, TranscriptRecord] = {}
        for chunk in (ids[i : i + 500] for i in range(0, len(ids), 500)):
            for r in self._select(
                TranscriptRecord, table.c.trial_id.in_(chunk), order=("trial_id",)
            ):
                out[r.trial_id] = r
        return out

    def transcript(self, trial_id: str) -> TranscriptRecord | None:
        table = TABLES[TranscriptRecord].table
        found = self._select(TranscriptRecord, table.c.trial_id == trial_id, order=("trial_id",))
        return found[0] if found else None

    def windows(
        self,
        last: int | None = None,
        *,
        size: str | None = None,
        scenarios: Iterable[str] | None = None,
    ) -> list[WindowRecord]:
        """Each scenario's windows (of every size, or of `size`), oldest first; with `last`,
        only the `last` most recent of each scenario and size."""
        table = TABLES[WindowRecord].table
        where = []
        if size is not None:
            where.append(table.c.window == size)
        if scenarios is not None:
            where.append(table.c.scenario_id.in_(sorted(set(scenarios))))
        rows: list[WindowRecord] = self._select(
            WindowRecord, *where, order=("scenario_id", "window", "window_start")
        )
        if last is None:
            return rows
        kept: list[WindowRecord] = []
        by: dict[tuple[str, str], list[WindowRecord]] = {}
        for row in rows:
            by.setdefault((row.scenario_id, row.window), []).append(row)
        for group in by.values():
            kept.extend(group[-last:] if last > 0 else [])
        return sorted(kept, key=lambda r: (r.scenario_id, r.window, r.window_start))

    def runs(self) -> list[str]:
        if not self.has_schema():
            return []
        table = TABLES[TrialRecord].table
        with self.engine.connect() as conn:
            rows = conn.execute(select(table.c.run_id, func.count()).group_by(table.c.run_id))
            return sorted(r[0] for r in rows)

    def run_scenarios(self) -> list[tuple[str, str, Any]]:
        """(run_id, scenario_id, last verdict time) of every summary: which runs covered
        which scenarios, and when, so a report can name the previous run of its scenarios."""
        if not self.has_schema():
            return []
        table = TABLES[ScenarioSummary].table
        query = select(table.c.run_id, table.c.scenario_id, table.c.last_verdict_at)
        with self.engine.connect() as conn:
            return [(r.run_id, r.scenario_id, r.last_verdict_at) for r in conn.execute(query)]

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of every projection table, as JSON-ready dicts in key order: what a
        rebuilt projection is compared with, across backends."""
        out: dict[str, list[dict[str, Any]]] = {}
        for record in TABLES:
            table = TABLES[record].table
            keys = tuple(c.name for c in table.primary_key.columns)
            rows = self._select(record, order=keys)
            out[table.name] = [r.model_dump(mode="json") for r in rows]
        return out


__all__ = ["Record", "Store", "METADATA"]
