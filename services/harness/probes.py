"""State probes: the path into the product's store or API (the method's "state-inspection
path"). Each polls for the session until it is there or `wait_s` has passed; absent after
the wait means no SessionPersisted (the state gate then fails with "no persisted session").

- `http`: GET the URL template -> 200 {"state": {...}, "exit_reason": str|null}; 404 not yet.
- `sql`: a read-only SQLAlchemy connection, a parameterised query with :session_id, the
  state (a JSON object, or its text) and the exit read from the named columns.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp

from services.harness.domain import Probed
from services.harness.target import HttpProbe, NoProbe, SqlProbe

MAX_STATE_BYTES = 4 * 1024 * 1024


class StateProbe(Protocol):
    async def find(self, session_id: str) -> tuple[Probed | None, str | None]:
        """The persisted session (None: not there within the wait) and, if not, why."""

    async def close(self) -> None:
        """Release what the probe holds (a pool, an engine); most hold nothing."""


def as_state(value: Any) -> dict[str, Any] | None:
    if isinstance(value, (bytes, str)):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


# However little of the wait is left, one read may take this long: a probe with
# `wait_s: 0` still reads once.
ONE_READ_MIN_S = 1.0
CLOSE_WAIT_S = 2.0  # how long closing a SQL probe waits for its interrupted reads


async def _poll(once: Any, wait_s: float, interval_s: float) -> tuple[Probed | None, str | None]:
    """Read until found or `wait_s` has passed. A read that does not return (a query that
    never ends, a store that accepts and never answers) is given up at the end of the
    wait: the trial then has no SessionPersisted, as with any session not found."""
    deadline = time.monotonic() + wait_s
    why: str | None = None
    while True:
        try:
            found, why = await asyncio.wait_for(
                once(), max(deadline - time.monotonic(), ONE_READ_MIN_S)
            )
        except TimeoutError:
            return None, f"the state probe did not answer within {wait_s:g} s"
        if found is not None:
            return found, None
        if time.monotonic() + interval_s > deadline:
            return None, why or f"no persisted session within {wait_s:g} s"
        await asyncio.sleep(interval_s)


class HttpStateProbe:
    def __init__(self, target: HttpProbe) -> None:
        self.target = target
        self._session: aiohttp.ClientSession | None = None

    async def _once(self, session_id: str) -> tuple[Probed | None, str | None]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        url = self.target.url.replace("{session_id}", quote(session_id, safe=""))
        try:
            async with self._session.get(url, headers=self.target.headers) as response:
                if response.status == 404:
                    return (
                        None,
                        f"no persisted session within {self.target.wait_s:g} s "
                        f"({url} answered 404)",
                    )
                raw = await response.content.read(MAX_STATE_BYTES + 1)
                if response.status != 200:
                    return None, f"{url} answered HTTP {response.status}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            return None, f"{url} unreachable: {type(exc).__name__}: {exc}"
        if len(raw) > MAX_STATE_BYTES:
            return None, f"{url}: the session is larger than {MAX_STATE_BYTES} bytes"
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            return None, f"{url}: the answer is not JSON"
        state = as_state(body.get("state")) if isinstance(body, dict) else None
        if state is None:
            return None, f"{url}: the answer has no `state` object"
        exit_reason = body.get("exit_reason")
        return Probed(
            state, exit_reason if isinstance(exit_reason, str) and exit_reason else None
        ), None

    async def find(self, session_id: str) -> tuple[Probed | None, str | None]:
        return await _poll(
            lambda: self._once(session_id), self.target.wait_s, self.target.interval_s
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def read_only_engine(url: str) -> Any:
    """An engine that cannot write: SQLite opened with mode=ro, PostgreSQL sessions
    read-only by default; for any other database each read is rolled back."""
    import sqlite3

    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database or ""
        if not path or path == ":memory:":
            raise ValueError("a sql probe needs the product's SQLite file, not :memory:")
        # NullPool: each read opens and closes its own connection in its own thread. The
        # "sqlite://" URL alone would pick SingletonThreadPool, which closes other threads'
        # connections once five threads have one: with a thread per read, a connection
        # closed under a running query (a segfault in sqlite3, seen in passk run).
        return create_engine(
            "sqlite://",
            creator=lambda: sqlite3.connect(
                f"file:{quote(path)}?mode=ro", uri=True, check_same_thread=False
            ),
            poolclass=NullPool,
        )
    if parsed.get_backend_name() == "postgresql":
        return create_engine(url, connect_args={"options": "-c default_transaction_read_only=on"})
    return create_engine(url)


class SqlStateProbe:
    def __init__(self, target: SqlProbe) -> None:
        from sqlalchemy import text

        self.target = target
        self._engine = read_only_engine(target.url)
        self._query = text(target.query)
        self._reads: set[threading.Thread] = set()  # reads not yet returned, given up or not

    def _read(self, session_id: str, reading: dict[str, Any]) -> tuple[Probed | None, str | None]:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self._engine.connect() as connection:
                # Where `_give_up` finds the driver's connection to interrupt its query.
                reading["dbapi"] = connection.connection.dbapi_connection
                try:
                    row = (
                        connection.execute(self._query, {"session_id": session_id})
                        .mappings()
                        .first()
                    )
                finally:
                    with reading["lock"]:  # no interrupt once the connection may close
                        reading.pop("dbapi", None)
                    connection.rollback()
        except SQLAlchemyError as exc:
            return (
                None,
                f"the sql probe failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
            )
        if row is None:
            return None, None
        if self.target.state_column not in row:
            return None, f"the query returned no column {self.target.state_column!r}"
        state = as_state(row[self.target.state_column])
        if state is None:
            return None, f"column {self.target.state_column!r} holds no JSON object"
        exit_reason = row.get(self.target.exit_column) if self.target.exit_column else None
        return Probed(state, str(exit_reason) if exit_reason else None), None

    async def _once(self, session_id: str) -> tuple[Probed | None, str | None]:
        """One read, in a thread of its own (a daemon): a query that never returns must
        not hold up the run's end, as a thread of asyncio's executor would (asyncio.run
        waits for those, SIGINT or not). Cancelled (the wait is over, the run stopped),
        the query is interrupted where the driver can, and abandoned anyway."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[tuple[Probed | None, str | None]] = loop.create_future()
        reading: dict[str, Any] = {"lock": threading.Lock()}

        def settle(
            result: tuple[Probed | None, str | None] | None, error: BaseException | None
        ) -> None:
            if answer.done():
                return
            if error is not None:
                answer.set_exception(error)
            else:
                answer.set_result(result)  # type: ignore[arg-type]

        def read() -> None:
            result, error = None, None
            try:
                result = self._read(session_id, reading)
            except BaseException as exc:  # handed to the awaiting task
                error = exc
            try:
                loop.call_soon_threadsafe(settle, result, error)
            except RuntimeError:  # the loop is gone: nobody waits for this read any more
                pass

        thread = threading.Thread(target=read, name="passk-sql-probe", daemon=True)
        self._reads = {t for t in self._reads if t.is_alive()} | {thread}
        thread.start()
        try:
            return await answer
        except asyncio.CancelledError:
            with reading["lock"]:  # the connection is not closed while it is interrupted
                _give_up(reading.get("dbapi"))
            raise

    async def find(self, session_id: str) -> tuple[Probed | None, str | None]:
        return await _poll(
            lambda: self._once(session_id), self.target.wait_s, self.target.interval_s
        )

    async def close(self) -> None:
        """Close the engine once its reads have returned; an interrupted query takes a
        moment to. Disposing under a read still closing its cursor made SQLAlchemy log
        that error with a traceback; a read still running after CLOSE_WAIT_S is left to
        the process's end (its thread is a daemon)."""
        deadline = time.monotonic() + CLOSE_WAIT_S
        while any(t.is_alive() for t in self._reads) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not any(t.is_alive() for t in self._reads):
            self._engine.dispose()


def _give_up(dbapi: Any) -> None:
    """Ask the database to stop a query no one waits for: sqlite3's `interrupt`, a
    PostgreSQL driver's `cancel`; a driver with neither leaves it to finish on its own."""
    stop = getattr(dbapi, "interrupt", None) or getattr(dbapi, "cancel", None)
    if stop is None:
        return
    try:
        stop()
    except Exception:  # the query is abandoned whatever the driver says
        pass


class NoStateProbe(StateProbe):
    def __init__(self, target: NoProbe | None = None) -> None:
        self.target = target

    async def find(self, session_id: str) -> tuple[Probed | None, str | None]:
        return None, "the target has no state probe"


# The probe of each kind of `state:` a target file can give.
PROBES: dict[type, Callable[[Any], StateProbe]] = {
    HttpProbe: HttpStateProbe,
    SqlProbe: SqlStateProbe,
    NoProbe: NoStateProbe,
}


def make_probe(target: HttpProbe | SqlProbe | NoProbe) -> StateProbe:
    return PROBES[type(target)](target)
