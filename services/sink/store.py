"""The SQL projection: trials, gate results, judge verdicts, transcripts, scenario summaries.

Every write is an upsert on the row's natural key that only replaces an equal-or-older
version (see the rule in `services.sink.domain`), so redelivered and replayed events are
harmless. The tables live in their own metadata so `reset` never touches other tables
that share the database (the judge cache, say).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, inspect, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import registry
from sqlmodel import SQLModel

from services.common.db import engine_for
from services.sink.domain import (
    GateRecord,
    JudgeRecord,
    Record,
    ScenarioSummary,
    SinkEvent,
    TranscriptRecord,
    TrialRecord,
    record_for,
    summarize,
)


class SinkTable(SQLModel, registry=registry()):
    """Base of the projection's tables; its own metadata, apart from any other tables."""


class TrialRow(TrialRecord, SinkTable, table=True):
    __tablename__ = "trials"


class GateResultRow(GateRecord, SinkTable, table=True):
    __tablename__ = "gate_results"


class JudgeVerdictRow(JudgeRecord, SinkTable, table=True):
    __tablename__ = "judge_verdicts"


class TranscriptRow(TranscriptRecord, SinkTable, table=True):
    __tablename__ = "transcripts"


class ScenarioSummaryRow(ScenarioSummary, SinkTable, table=True):
    __tablename__ = "scenario_summaries"


METADATA = SinkTable.metadata
TABLES: dict[type[SQLModel], tuple[Any, str]] = {
    # record type -> (table, the column that orders versions of one key)
    TrialRecord: (TrialRow.__table__, "verdict_at"),  # type: ignore[attr-defined]
    GateRecord: (GateResultRow.__table__, "occurred_at"),  # type: ignore[attr-defined]
    JudgeRecord: (JudgeVerdictRow.__table__, "occurred_at"),  # type: ignore[attr-defined]
    TranscriptRecord: (TranscriptRow.__table__, "occurred_at"),  # type: ignore[attr-defined]
    ScenarioSummary: (ScenarioSummaryRow.__table__, "last_verdict_at"),  # type: ignore[attr-defined]
}


class Store:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = engine_for(url)
        self._dialect = self.engine.dialect.name
        if self._dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported database {self._dialect!r} (use sqlite or postgresql)")
        self._schema_ready = False
        self._schema_lock = threading.Lock()

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
            self._schema_ready = True

    def reset(self) -> None:
        """A fresh, empty projection: drop the projection's tables and create them again."""
        with self._schema_lock:
            METADATA.drop_all(self.engine)
            METADATA.create_all(self.engine)
            self._schema_ready = True

    def has_schema(self) -> bool:
        return inspect(self.engine).has_table(TrialRow.__tablename__)

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ writes

    def apply(self, event: SinkEvent) -> None:
        self.apply_many([event])

    def apply_many(self, events: Iterable[SinkEvent]) -> int:
        """Store a batch in one transaction; each touched run/scenario summary is
        recomputed once, from the trial rows, at the end of it."""
        self.create_schema()
        count = 0
        touched: set[tuple[str, str]] = set()
        with self.engine.begin() as conn:
            for event in events:
                record = record_for(event)
                if isinstance(record, TrialRecord):
                    touched.add((record.run_id, record.scenario_id))
                    # A re-grade may move a trial (a corrected run or scenario id): the
                    # summary it leaves must be recomputed too.
                    touched.update(self._trial_home(conn, record.trial_id))
                self._upsert(conn, record)
                count += 1
            for run_id, scenario_id in sorted(touched):
                self._refresh_summary(conn, run_id, scenario_id)
        return count

    def _insert(self, table: Any) -> Any:
        return (postgresql if self._dialect == "postgresql" else sqlite).insert(table)

    def _upsert(self, conn: Connection, record: SQLModel) -> None:
        table, version = TABLES[type(record)]
        values = record.model_dump()
        keys = [c.name for c in table.primary_key.columns]
        stmt = self._insert(table).values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=keys,
            set_={name: stmt.excluded[name] for name in values if name not in keys},
            where=table.c[version] <= stmt.excluded[version],
        )
        conn.execute(stmt)

    def _trial_home(self, conn: Connection, trial_id: str) -> list[tuple[str, str]]:
        table, _ = TABLES[TrialRecord]
        query = select(table.c.run_id, table.c.scenario_id).where(table.c.trial_id == trial_id)
        return [(r.run_id, r.scenario_id) for r in conn.execute(query)]

    def _refresh_summary(self, conn: Connection, run_id: str, scenario_id: str) -> None:
        if self._dialect == "postgresql":
            # Two workers landing trials of one scenario at once would each miss the
            # other's uncommitted row; this lock orders them so the last sees both.
            conn.execute(
                text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"),
                {"key": f"passk.summary:{run_id}\x1f{scenario_id}"},
            )
        trials = self._trials(conn, run_id, scenario_id)
        table, _ = TABLES[ScenarioSummary]
        if not trials:
            conn.execute(
                table.delete().where(table.c.run_id == run_id, table.c.scenario_id == scenario_id)
            )
            return
        summary = summarize(run_id, scenario_id, trials)
        values = summary.model_dump()
        stmt = self._insert(table).values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "scenario_id"],
            set_={n: stmt.excluded[n] for n in values if n not in ("run_id", "scenario_id")},
        )
        conn.execute(stmt)

    # ----------------------------------------------------------------- queries

    def _trials(
        self, conn: Connection, run_id: str, scenario_id: str | None = None
    ) -> list[TrialRecord]:
        query = select(TrialRow.__table__).where(  # type: ignore[attr-defined]
            TrialRow.__table__.c.run_id == run_id  # type: ignore[attr-defined]
        )
        if scenario_id is not None:
            query = query.where(TrialRow.__table__.c.scenario_id == scenario_id)  # type: ignore[attr-defined]
        rows = conn.execute(query.order_by(text("scenario_id"), text("trial_id")))
        return [TrialRecord.model_validate(dict(r._mapping)) for r in rows]

    def _select(self, record: type[SQLModel], *where: Any, order: tuple[str, ...]) -> list[Any]:
        if not self.has_schema():
            return []
        table, _ = TABLES[record]
        query = select(table).where(*where).order_by(*(table.c[o] for o in order))
        with self.engine.connect() as conn:
            return [record.model_validate(dict(r._mapping)) for r in conn.execute(query)]

    def trials(self, run_id: str) -> list[TrialRecord]:
        if not self.has_schema():
            return []
        with self.engine.connect() as conn:
            return self._trials(conn, run_id)

    def summaries(self, run_id: str) -> list[ScenarioSummary]:
        table, _ = TABLES[ScenarioSummary]
        return self._select(ScenarioSummary, table.c.run_id == run_id, order=("scenario_id",))

    def gate_results(self, run_id: str) -> list[GateRecord]:
        table, _ = TABLES[GateRecord]
        return self._select(GateRecord, table.c.run_id == run_id, order=("trial_id", "gate"))

    def judge_verdicts(self, run_id: str) -> list[JudgeRecord]:
        table, _ = TABLES[JudgeRecord]
        return self._select(JudgeRecord, table.c.run_id == run_id, order=("trial_id", "judge_id"))

    def transcript(self, trial_id: str) -> TranscriptRecord | None:
        table, _ = TABLES[TranscriptRecord]
        found = self._select(TranscriptRecord, table.c.trial_id == trial_id, order=("trial_id",))
        return found[0] if found else None

    def runs(self) -> list[str]:
        if not self.has_schema():
            return []
        table, _ = TABLES[TrialRecord]
        with self.engine.connect() as conn:
            rows = conn.execute(select(table.c.run_id, func.count()).group_by(table.c.run_id))
            return sorted(r[0] for r in rows)

    def run_scenarios(self) -> list[tuple[str, str, Any]]:
        """(run_id, scenario_id, last verdict time) of every summary: which runs covered
        which scenarios, and when, so a report can name the previous run of its scenarios."""
        if not self.has_schema():
            return []
        table, _ = TABLES[ScenarioSummary]
        query = select(table.c.run_id, table.c.scenario_id, table.c.last_verdict_at)
        with self.engine.connect() as conn:
            return [(r.run_id, r.scenario_id, r.last_verdict_at) for r in conn.execute(query)]

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of every projection table, as JSON-ready dicts in key order: what a
        rebuilt projection is compared with, across backends."""
        out: dict[str, list[dict[str, Any]]] = {}
        for record in TABLES:
            table, _ = TABLES[record]
            keys = tuple(c.name for c in table.primary_key.columns)
            rows = self._select(record, order=keys)
            out[table.name] = [r.model_dump(mode="json") for r in rows]
        return out


__all__ = ["Record", "Store", "METADATA"]
