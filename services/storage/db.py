"""The SQL engine for the projection and the judge cache (SQLite by default, PostgreSQL too)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import ConnectionPoolEntry
from sqlmodel import create_engine

from services.contract.masking import mask_url


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    try:
        make_url(url)
    except ValueError:  # a port that is not a number: a usage error, not a traceback
        raise ArgumentError("the URL's port is not a number") from None
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        # hide_parameters: an error's message (logged by a worker during an outage) names
        # the statement, never the values bound to it (transcripts, states).
        engine = create_engine(url, connect_args={"timeout": 30}, hide_parameters=True)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
            # WAL lets the report read while a sink writes; several processes share the file.
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return create_engine(url, pool_pre_ping=True, hide_parameters=True)


def redacted(url: str) -> str:
    """A database URL fit to print: its password replaced by ***."""
    try:
        make_url(url)
    except (ArgumentError, ValueError):  # not a URL SQLAlchemy reads: print nothing of it
        return "(unparseable database URL)"
    return mask_url(url)  # also a password in the query string, which SQLAlchemy shows
