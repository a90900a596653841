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
    probe = SqlStateProbe(SqlProbe(kind="sql", url=f"sqlite:///{tmp_path / 'p.db'}",
                                   query=QUERY, exit_column="exit_reason", wait_s=0))
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
    probe = SqlStateProbe(SqlProbe(kind="sql", url=f"sqlite:///{tmp_path / 'p.db'}",
                                   query=QUERY, wait_s=5, interval_s=0.05))
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
        return web.json_response({"state": {"id": request.match_info["sid"]},
                                  "exit_reason": "product_closed"})

    app = web.Application()
    app.router.add_get("/sessions/{sid}", session)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    probe = HttpStateProbe(HttpProbe(kind="http", url=f"http://127.0.0.1:{port}/sessions/"
                                     "{session_id}", wait_s=5, interval_s=0.05))
    found, _ = await probe.find("a/b")
    assert found is not None and found.state == {"id": "a/b"} and hits["n"] == 3
    hits["n"] = -1000
    gone, why = await HttpStateProbe(HttpProbe(
        kind="http", url=f"http://127.0.0.1:{port}/sessions/{{session_id}}", wait_s=0.1,
        interval_s=0.05)).find("x")
    assert gone is None and "404" in (why or "")
    await probe.close()
    await runner.cleanup()
