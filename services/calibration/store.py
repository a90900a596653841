"""Calibration in the store: every calibration with its time (the drift history), and
each judge's labelled set grown by production labels. Own metadata, apart from the sink's
projection, so `passk rebuild` never drops human labels."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.orm import registry
from sqlmodel import JSON, Field, SQLModel

from schemas.events import ConfusionCounts, JudgeCalibration
from services.storage.db import engine_for
from services.storage.records import Projection, as_utc, row_of


class CalibrationTable(SQLModel, registry=registry()):
    """Base of calibration's tables."""


class CalibrationRow(Projection, ConfusionCounts, CalibrationTable, table=True):
    __tablename__ = "judge_calibrations"
    projects = JudgeCalibration
    computed = ("occurred_at",)

    event_id: str = Field(primary_key=True)
    judge_id: str = Field(index=True)
    judge_version: str
    source: str
    dimension: str | None = None
    model: str | None = None
    gating: bool
    reason: str
    occurred_at: datetime


class LabelledItemRow(CalibrationTable, table=True):
    """One human label in a judge's set; (judge, item) is its identity, so a repeated
    label replaces the earlier one instead of counting twice."""

    __tablename__ = "calibration_items"

    judge_id: str = Field(primary_key=True)
    item_id: str = Field(primary_key=True)
    trial_id: str | None = None
    label: str
    note: str | None = None
    judge_version: str | None = None
    judge_result: str | None = None
    judge_reason: str | None = None
    transcript: list[dict[str, Any]] | None = Field(default=None, sa_type=JSON)
    labelled_at: datetime


METADATA = CalibrationTable.metadata


class CalibrationStore:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = engine_for(url)
        self._ready = False
        self._lock = threading.Lock()

    def create_schema(self) -> None:
        with self._lock:
            if not self._ready:
                try:
                    METADATA.create_all(self.engine)
                except Exception:  # another process created them between check and CREATE
                    METADATA.create_all(self.engine)
                self._ready = True

    def close(self) -> None:
        self.engine.dispose()

    def _upsert(self, table: Any, values: dict[str, Any], keys: list[str]) -> None:
        dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(table).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=keys, set_={k: stmt.excluded[k] for k in values if k not in keys}
        )
        with self.engine.begin() as conn:
            conn.execute(stmt)

    def record_calibration(self, c: JudgeCalibration) -> None:
        self.create_schema()
        row = row_of(CalibrationRow, c, occurred_at=as_utc(c.occurred_at))
        self._upsert(CalibrationRow.__table__, row.model_dump(), ["event_id"])  # type: ignore[attr-defined]

    def history(self, judge_id: str) -> list[CalibrationRow]:
        self.create_schema()
        table = CalibrationRow.__table__  # type: ignore[attr-defined]
        query = select(table).where(table.c.judge_id == judge_id).order_by(table.c.occurred_at)
        with self.engine.connect() as conn:
            return [CalibrationRow.model_validate(dict(r._mapping)) for r in conn.execute(query)]

    def put_item(self, row: LabelledItemRow) -> None:
        self.create_schema()
        self._upsert(LabelledItemRow.__table__, row.model_dump(), ["judge_id", "item_id"])  # type: ignore[attr-defined]

    def items(self, judge_id: str | None = None) -> list[LabelledItemRow]:
        self.create_schema()
        table = LabelledItemRow.__table__  # type: ignore[attr-defined]
        query = select(table).order_by(table.c.judge_id, table.c.item_id)
        if judge_id is not None:
            query = query.where(table.c.judge_id == judge_id)
        with self.engine.connect() as conn:
            return [LabelledItemRow.model_validate(dict(r._mapping)) for r in conn.execute(query)]


def now() -> datetime:
    return datetime.now(UTC)
