from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from aiohttp import web

from services.harness.probes import HttpStateProbe, SqlStateProbe, read_only_engine
from services.harness.target import HttpProbe, SqlProbe

QUERY = "SELECT state, exit_reason FROM sessions WHERE id = :session_id"


def store(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, state TEXT, exit_reason TEXT)")
    db.execute("INSERT INTO sessions VALUES ('s1', ?, 'handed_off')", (json.dumps({"a": 1}),))
    return db


async def test_sql_probe_reads_state_and_exit(tmp_path: Path) -> None:
    store(tmp_path / "p.db")
    probe = SqlStateProbe(
        SqlProbe(
            kind="sql",
            url=f"sqlite:///{tmp_path / 'p.db'}",
            query=QUERY,
            exit_column="exit_reason",
            wait_s=0,
        )
    )
    found, why = await probe.find("s1")
    assert found is not None and (found.state, found.exit_reason) == ({"a": 1}, "handed_off")
    missing, why = await probe.find("nope")
    assert missing is None and "no persisted session within 0 s" in (why or "")
    await probe.close()


def test_sql_probe_cannot_write(tmp_path: Path) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    store(tmp_path / "p.db")
    engine = read_only_engine(f"sqlite:///{tmp_path / 'p.db'}")
    with engine.connect() as connection, pytest.raises(OperationalError, match="readonly"):
        connection.execute(text("DELETE FROM sessions"))
    engine.dispose()


async def test_sql_probe_polls_until_the_row_appears(tmp_path: Path) -> None:
    db = store(tmp_path / "p.db")
    probe = SqlStateProbe(
        SqlProbe(
            kind="sql", url=f"sqlite:///{tmp_path / 'p.db'}", query=QUERY, wait_s=5, interval_s=0.05
        )
    )
    import asyncio

    async def later() -> None:
        await asyncio.sleep(0.3)
        db.execute("INSERT INTO sessions VALUES ('s2', '{\"b\": 2}', NULL)")

    started = time.monotonic()
    writer = asyncio.create_task(later())
    found, _ = await probe.find("s2")
    await writer
    assert found is not None and found.state == {"b": 2} and found.exit_reason is None
    assert 0.25 < time.monotonic() - started < 4
    await probe.close()


async def test_http_probe_waits_through_404s() -> None:
    hits = {"n": 0}

    async def session(request: web.Request) -> web.Response:
        hits["n"] += 1
        if hits["n"] < 3:
            return web.json_response({}, status=404)
        return web.json_response(
            {"state": {"id": request.match_info["sid"]}, "exit_reason": "product_closed"}
        )

    app = web.Application()
    app.router.add_get("/sessions/{sid}", session)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    probe = HttpStateProbe(
        HttpProbe(
            kind="http",
            url=f"http://127.0.0.1:{port}/sessions/{{session_id}}",
            wait_s=5,
            interval_s=0.05,
        )
    )
    found, _ = await probe.find("a/b")
    assert found is not None and found.state == {"id": "a/b"} and hits["n"] == 3
    hits["n"] = -1000
    gone, why = await HttpStateProbe(
        HttpProbe(
            kind="http",
            url=f"http://127.0.0.1:{port}/sessions/{{session_id}}",
            wait_s=0.1,
            interval_s=0.05,
        )
    ).find("x")
    assert gone is None and "404" in (why or "")
    await probe.close()
    await runner.cleanup()


# A read-only query that never returns: it counts an endless recursive sequence.
ENDLESS = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
    "SELECT count(*) AS n, '{}' AS state FROM c WHERE :session_id IS NOT NULL"
)


def _probe_threads() -> int:
    import threading

    return sum(1 for t in threading.enumerate() if t.name == "passk-sql-probe")


async def test_a_sql_query_that_never_returns_ends_at_the_wait_and_is_interrupted(
    tmp_path: Path,
) -> None:
    import asyncio

    from tests.support import wait_for

    store(tmp_path / "p.db")
    probe = SqlStateProbe(
        SqlProbe(
            kind="sql",
            url=f"sqlite:///{tmp_path / 'p.db'}",
            query=ENDLESS,
            wait_s=1.5,
            interval_s=0.05,
        )
    )
    started = time.monotonic()
    found, why = await asyncio.wait_for(probe.find("s1"), 30)
    took = time.monotonic() - started
    assert found is None and why == "the state probe did not answer within 1.5 s"
    assert 1.4 < took < 5, took  # today: for ever (the query runs in asyncio's executor)
    # the query itself was interrupted, not left running in the background
    await asyncio.to_thread(
        wait_for, lambda: _probe_threads() == 0, timeout=10, what="the endless query interrupted"
    )
    await probe.close()


async def test_cancelling_a_sql_probe_mid_query_returns_at_once(tmp_path: Path) -> None:
    import asyncio

    store(tmp_path / "p.db")
    probe = SqlStateProbe(
        SqlProbe(kind="sql", url=f"sqlite:///{tmp_path / 'p.db'}", query=ENDLESS, wait_s=600)
    )
    task = asyncio.create_task(probe.find("s1"))
    await asyncio.sleep(0.3)  # the query is running
    started = time.monotonic()
    task.cancel()  # what the harness does to a trial when the run is stopped
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1
    await probe.close()


async def test_an_http_store_that_never_answers_ends_at_the_wait() -> None:
    import asyncio

    async def never(request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/sessions/{sid}", never)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    probe = HttpStateProbe(
        HttpProbe(kind="http", url=f"http://127.0.0.1:{port}/sessions/{{session_id}}", wait_s=1.5)
    )
    started = time.monotonic()
    found, why = await asyncio.wait_for(probe.find("s"), 30)
    assert found is None and why == "the state probe did not answer within 1.5 s"
    assert 1.4 < time.monotonic() - started < 5
    await probe.close()
    await runner.cleanup()


async def test_many_concurrent_sql_reads_each_keep_their_own_connection(tmp_path: Path) -> None:
    # Each read runs in a thread of its own. With SQLAlchemy's default pool for a
    # "sqlite://" engine (SingletonThreadPool, five connections), the sixth thread's
    # checkout closed another thread's connection, under its running query: passk run
    # crashed with SIGSEGV in sqlite3 (test_producer_outage, 2026-12-06).
    import asyncio

    from sqlalchemy.pool import SingletonThreadPool

    db = store(tmp_path / "p.db")
    db.executemany(
        "INSERT INTO sessions VALUES (?, ?, 'product_closed')",
        [(f"s-{i}", json.dumps({"n": i})) for i in range(40)],
    )
    probe = SqlStateProbe(
        SqlProbe(kind="sql", url=f"sqlite:///{tmp_path / 'p.db'}", query=QUERY, wait_s=0)
    )
    assert not isinstance(probe._engine.pool, SingletonThreadPool)
    try:
        for _ in range(3):
            found = await asyncio.gather(*(probe.find(f"s-{i}") for i in range(40)))
            assert [f.state for f, _ in found if f is not None] == [{"n": i} for i in range(40)]
    finally:
        await probe.close()
