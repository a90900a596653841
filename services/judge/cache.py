"""Judge verdicts cached in the store, by (model, prompt template hash, assertion, transcript hash).

Replaying the same traffic, or re-grading after a change that touches none of the four, is
answered from here with no model call. `PASSK_JUDGE_CACHE=0` turns lookups off (every judge
asks the model; answers are still stored). `error` results are never cached: only answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime

from sqlalchemy import inspect
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Field, Session, SQLModel

from services.judge.domain import CachedAnswer


def cache_key(model: str, prompt_hash: str, assertion: str, transcript_hash: str) -> str:
    body = json.dumps([model, prompt_hash, assertion.strip(), transcript_hash])
    return hashlib.sha256(body.encode()).hexdigest()


class JudgeCacheEntry(SQLModel, table=True):
    __tablename__ = "judge_cache"

    key: str = Field(primary_key=True, max_length=64)
    model: str = Field(max_length=200, description="the model asked (part of the key)")
    prompt_hash: str = Field(max_length=64)
    assertion: str
    transcript_hash: str = Field(max_length=64)
    passed: bool
    reason: str
    answered_by: str | None = Field(None, max_length=200, description="model id in the answer")
    input_tokens: int | None = None
    output_tokens: int | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


class VerdictCache:
    def __init__(self, engine: Engine, *, lookups: bool = True) -> None:
        self.engine = engine
        self.lookups = lookups

    def create(self) -> None:
        table = SQLModel.metadata.tables[str(JudgeCacheEntry.__tablename__)]
        try:
            SQLModel.metadata.create_all(self.engine, tables=[table])
        except SQLAlchemyError:
            # Two workers starting at once both see no table; the loser's CREATE fails.
            if not inspect(self.engine).has_table(table.name):
                raise

    def get(self, key: str) -> CachedAnswer | None:
        if not self.lookups:
            return None
        with Session(self.engine) as session:
            row = session.get(JudgeCacheEntry, key)
            if row is None:
                return None
            return CachedAnswer(
                row.passed, row.reason, row.answered_by, row.input_tokens, row.output_tokens
            )

    def put(self, entry: JudgeCacheEntry) -> None:
        with Session(self.engine) as session:
            try:
                session.merge(entry)
                session.commit()
            except IntegrityError:  # another worker stored the same answer first
                session.rollback()

    async def aget(self, key: str) -> CachedAnswer | None:
        return await asyncio.to_thread(self.get, key)

    async def aput(self, entry: JudgeCacheEntry) -> None:
        await asyncio.to_thread(self.put, entry)
