"""The reference product: the debrief assistant as a small HTTP service with its own
SQLite store (passk's worked example of `passk run`; see docs/agents.md).

    python -m examples.agent.server [--host 127.0.0.1] [--port 8600] [--db FILE]
                                    [--faults JSON|@FILE]

POST /chat           {"session_id": str|null, "message": str}
                     -> {"session_id", "reply", "exit_reason": str|null}
GET  /sessions/{id}  -> 200 {"state": {...}, "exit_reason", "faults"} once the debrief
                        is filed; 404 before (or when nothing is filed)
GET  /healthz        -> 200

The fault plan (`--faults`, or PASSK_AGENT_FAULTS) switches faults on per trial, read
from the `X-Passk-Scenario-Id` and `X-Passk-Trial-Id` headers passk sends (see
examples/agent/debrief.py); requests without them get no fault.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from examples.agent.debrief import TRANSPORT_FAULT_AT, Debrief, faults_for, parse_plan, respond

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY,
  scenario_id TEXT,
  trial_id TEXT,
  progress TEXT NOT NULL,      -- the dialogue's state (JSON)
  state TEXT,                  -- the filed debrief (JSON); NULL until filed
  exit_reason TEXT,            -- the product's recorded exit; NULL when it never closed
  faults TEXT NOT NULL,        -- the faults switched on for this session (JSON list)
  created_at TEXT NOT NULL,
  filed_at TEXT
)
"""
STORE = web.AppKey("store", sqlite3.Connection)
PLAN = web.AppKey("plan", dict)


def open_store(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")  # readers (a state probe) never block the writer
    db.execute(SCHEMA)
    return db


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _trial_number(trial_id: str | None) -> int | None:
    if not trial_id:
        return None
    tail = trial_id.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


async def chat(request: web.Request) -> web.StreamResponse:
    db, plan = request.app[STORE], request.app[PLAN]
    try:
        body = await request.json()
        message = body["message"]
        session_id = body.get("session_id")
        if not isinstance(message, str):
            raise TypeError
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return web.json_response({"error": "expected {session_id, message}"}, status=400)
    if session_id is None:
        scenario = request.headers.get("X-Passk-Scenario-Id")
        trial = request.headers.get("X-Passk-Trial-Id")
        debrief = Debrief(faults=faults_for(plan, scenario, _trial_number(trial)))
        session_id = f"dbr-{uuid.uuid4().hex[:16]}"
        db.execute("INSERT INTO sessions (id, scenario_id, trial_id, progress, faults, "
                   "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                   (session_id, scenario, trial, json.dumps(debrief.to_dict()),
                    json.dumps(debrief.faults), _now()))
    else:
        row = db.execute("SELECT progress FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return web.json_response({"error": f"no session {session_id}"}, status=404)
        debrief = Debrief.from_dict(json.loads(row[0]))
    if debrief.replies + 1 == TRANSPORT_FAULT_AT:
        if "hang" in debrief.faults:
            await asyncio.sleep(3600)
        if "http_500" in debrief.faults:
            return web.json_response({"error": "injected failure"}, status=500)
        if "drop_connection" in debrief.faults:
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if "garbage" in debrief.faults:
            return web.Response(text="<html>oops</html>", content_type="text/html")
    turn = respond(debrief, message)
    db.execute("UPDATE sessions SET progress = ? WHERE id = ?",
               (json.dumps(debrief.to_dict()), session_id))
    if turn.file:
        db.execute("UPDATE sessions SET state = ?, exit_reason = ?, filed_at = ? WHERE id = ?",
                   (json.dumps(debrief.to_state()), turn.exit_reason, _now(), session_id))
    return web.json_response({"session_id": session_id, "reply": turn.reply,
                              "exit_reason": turn.exit_reason})


async def session(request: web.Request) -> web.Response:
    row = request.app[STORE].execute(
        "SELECT state, exit_reason, faults FROM sessions WHERE id = ? AND state IS NOT NULL",
        (request.match_info["session_id"],)).fetchone()
    if row is None:
        return web.json_response({"error": "no filed session"}, status=404)
    return web.json_response({"state": json.loads(row[0]), "exit_reason": row[1],
                              "faults": json.loads(row[2])})


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def make_app(db_path: Path, plan: dict[str, Any] | None = None) -> web.Application:
    app = web.Application(client_max_size=1024 * 1024)
    app[STORE] = open_store(db_path)
    app[PLAN] = parse_plan(plan or {})
    app.router.add_post("/chat", chat)
    app.router.add_get("/sessions/{session_id}", session)
    app.router.add_get("/healthz", healthz)
    return app


def load_plan(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    if text.startswith("@"):
        text = Path(text[1:]).read_text(encoding="utf-8")
    return parse_plan(json.loads(text))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="passk's reference product: the debrief "
                                                 "assistant (deterministic, no model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PASSK_AGENT_PORT", 8600)))
    parser.add_argument("--db", type=Path,
                        default=Path(os.environ.get("PASSK_AGENT_DB", "var/agent/agent.db")))
    parser.add_argument("--faults", default=os.environ.get("PASSK_AGENT_FAULTS"),
                        help='fault plan: JSON {"scenario": {"fault": [trial numbers]}} or @FILE')
    args = parser.parse_args(argv)
    try:
        plan = load_plan(args.faults)
    except (OSError, ValueError) as exc:
        parser.error(f"--faults: {exc}")
    print(f"debrief assistant (reference product, no model) on http://{args.host}:{args.port} "
          f"db={args.db} faults={json.dumps(plan)}", flush=True)
    web.run_app(make_app(args.db, plan), host=args.host, port=args.port, print=None,
                handler_cancellation=True, shutdown_timeout=1.0)


if __name__ == "__main__":
    main()
