"""What the log and the projection hold of each trial, gathered on disk: a scratch SQLite
file, so an audit of a week of traffic holds a batch of records in memory, not a week.

Each topic is read once (services.kafka.scan) and folded into a table keyed by trial id;
`facts` then walks the trials in trial-id order, one row at a time."""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from schemas.events import ConversationFinished
from services.audit.domain import TrialFacts
from services.contract.codec import Rejection, decode_or_reject
from services.contract.settings import Settings

_SCHEMA = """
CREATE TABLE finished (trial_id TEXT PRIMARY KEY, run_id TEXT, scenario_id TEXT,
                       session_id TEXT, finished_at REAL, logged_at REAL);
CREATE TABLE gated (trial_id TEXT PRIMARY KEY, scenario_version TEXT);
CREATE TABLE judged (trial_id TEXT, judge_id TEXT, PRIMARY KEY (trial_id, judge_id));
CREATE TABLE verdicts (trial_id TEXT PRIMARY KEY, attempt INTEGER, outcome TEXT,
                       event_id TEXT, logged_at REAL, finished_at REAL, value BLOB);
CREATE TABLE projected (trial_id TEXT PRIMARY KEY, event_id TEXT);
CREATE TABLE dead (trial_id TEXT PRIMARY KEY, reason TEXT);
CREATE TABLE attempts (trial_id TEXT PRIMARY KEY, attempt INTEGER);
"""


def _json(raw: bytes | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    from datetime import datetime

    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class Ledger:
    def __init__(self, path: Path, settings: Settings, *, run_id: str | None = None) -> None:
        self.db = sqlite3.connect(path)
        self.db.executescript(_SCHEMA)
        self.settings = settings
        self.run_id = run_id
        self.newest_finished: float | None = None

    def close(self) -> None:
        self.db.close()

    def _mine(self, value: dict[str, Any]) -> bool:
        return self.run_id is None or value.get("run_id") == self.run_id

    def _attempts(self, values: Iterable[dict[str, Any]]) -> None:
        """The highest grading attempt any stage has seen of each trial (a repair asks for
        the next one: an attempt already begun would be taken for a repeat)."""
        self.db.executemany(
            "INSERT INTO attempts VALUES (?, ?) ON CONFLICT (trial_id) DO UPDATE SET "
            "attempt = max(attempt, excluded.attempt)",
            [(v["trial_id"], int(v.get("attempt") or 1)) for v in values],
        )

    # ------------------------------------------------------------ folding topics

    def conversations(self, records: Sequence[Any]) -> None:
        """Valid ConversationFinished only: an invalid one is a dead letter, not a trial."""
        rows = []
        for r in records:
            event = decode_or_reject(r.value, ConversationFinished, self.settings)
            if isinstance(event, Rejection) or not self._mine({"run_id": event.run_id}):
                continue
            at = event.occurred_at.timestamp()
            self.newest_finished = max(at, self.newest_finished or at)
            rows.append(
                (
                    event.trial_id,
                    event.run_id,
                    event.scenario_id,
                    event.session_id,
                    at,
                    r.timestamp / 1000,
                )
            )
        self.db.executemany("INSERT OR IGNORE INTO finished VALUES (?, ?, ?, ?, ?, ?)", rows)

    def _values(self, records: Sequence[Any]) -> list[dict[str, Any]]:
        return [
            v
            for r in records
            if (v := _json(r.value)) and isinstance(v.get("trial_id"), str) and self._mine(v)
        ]

    def gate_results(self, records: Sequence[Any]) -> None:
        values = self._values(records)
        self.db.executemany(
            "INSERT OR IGNORE INTO gated VALUES (?, ?)",
            [(v["trial_id"], v.get("scenario_version")) for v in values],
        )
        self._attempts(values)

    def judge_verdicts(self, records: Sequence[Any]) -> None:
        values = self._values(records)
        self.db.executemany(
            "INSERT OR IGNORE INTO judged VALUES (?, ?)",
            [(v["trial_id"], v.get("judge_id")) for v in values],
        )
        self._attempts(values)

    def trial_verdicts(self, records: Sequence[Any]) -> None:
        """The newest attempt of each trial's verdict (a repeat or an older attempt read
        later changes nothing)."""
        rows, values = [], []
        for r in records:
            v = _json(r.value)
            if v and isinstance(v.get("trial_id"), str) and self._mine(v):
                values.append(v)
                rows.append(
                    (
                        v["trial_id"],
                        int(v.get("attempt") or 1),
                        v.get("outcome"),
                        v.get("event_id"),
                        r.timestamp / 1000,
                        _epoch(v.get("finished_at")),
                        r.value,
                    )
                )
        self.db.executemany(
            "INSERT INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (trial_id) DO UPDATE "
            "SET attempt = excluded.attempt, outcome = excluded.outcome, "
            "event_id = excluded.event_id, logged_at = excluded.logged_at, "
            "finished_at = excluded.finished_at, value = excluded.value "
            "WHERE excluded.attempt > verdicts.attempt",
            rows,
        )
        self._attempts(values)

    def dead_letters(self, records: Sequence[Any]) -> None:
        """A dead-lettered input that names a trial: that trial is accounted for."""
        rows = []
        for r in records:
            letter = _json(r.value)
            if not letter or not isinstance(letter.get("value_b64"), str):
                continue
            try:
                original = _json(base64.b64decode(letter["value_b64"]))
            except ValueError:
                continue
            if original and isinstance(original.get("trial_id"), str) and self._mine(original):
                rows.append((original["trial_id"], str(letter.get("reason") or "unknown")))
        self.db.executemany("INSERT OR IGNORE INTO dead VALUES (?, ?)", rows)

    def projection(self, rows: Iterable[tuple[str, str]]) -> None:
        self.db.executemany("INSERT OR REPLACE INTO projected VALUES (?, ?)", rows)

    # ------------------------------------------------------------------ reading

    def facts(self, judges_of: Callable[[str, str | None], frozenset[str]]) -> Iterator[TrialFacts]:
        """Every trial of the log, in trial-id order, with what each stage holds of it."""
        query = """
            SELECT f.trial_id, f.run_id, f.scenario_id, f.finished_at, f.logged_at,
                   g.trial_id IS NOT NULL, g.scenario_version,
                   (SELECT group_concat(judge_id, char(31)) FROM judged j
                     WHERE j.trial_id = f.trial_id),
                   v.attempt, v.outcome, v.event_id, v.logged_at, v.finished_at, p.event_id,
                   d.reason
              FROM finished f
              LEFT JOIN gated g ON g.trial_id = f.trial_id
              LEFT JOIN verdicts v ON v.trial_id = f.trial_id
              LEFT JOIN projected p ON p.trial_id = f.trial_id
              LEFT JOIN dead d ON d.trial_id = f.trial_id
             ORDER BY f.trial_id"""
        for row in self.db.execute(query):
            (
                trial_id,
                run_id,
                scenario_id,
                finished_at,
                logged_at,
                gated,
                version,
                judged,
                attempt,
                outcome,
                event_id,
                verdict_logged_at,
                verdict_finished_at,
                projected,
                dead,
            ) = row
            yield TrialFacts(
                trial_id=trial_id,
                run_id=run_id,
                scenario_id=scenario_id,
                finished_at=finished_at,
                logged_at=logged_at,
                gated=bool(gated),
                judges=frozenset(judged.split("\x1f")) if judged else frozenset(),
                expected_judges=judges_of(scenario_id, version),
                verdict_attempt=attempt,
                verdict_outcome=outcome,
                verdict_event_id=event_id,
                verdict_logged_at=verdict_logged_at,
                verdict_finished_at=verdict_finished_at,
                projected_event_id=projected,
                dead_letter=dead,
            )

    def identities(
        self, trial_ids: Iterable[str]
    ) -> Iterator[tuple[str, str, str, str, str | None]]:
        """(trial, run, scenario, session, scenario version its gate named, if any)."""
        for trial_id in trial_ids:
            row = self.db.execute(
                "SELECT f.trial_id, f.run_id, f.scenario_id, f.session_id, g.scenario_version "
                "FROM finished f LEFT JOIN gated g USING (trial_id) WHERE f.trial_id = ?",
                (trial_id,),
            ).fetchone()
            if row is not None:
                yield row

    def attempt_of(self, trial_id: str) -> int:
        row = self.db.execute(
            "SELECT attempt FROM attempts WHERE trial_id = ?", (trial_id,)
        ).fetchone()
        return int(row[0]) if row else 1

    def verdict_values(self, trial_ids: Iterable[str]) -> Iterator[bytes]:
        """The newest verdict of each trial, as the log holds it."""
        for trial_id in trial_ids:
            row = self.db.execute(
                "SELECT value FROM verdicts WHERE trial_id = ?", (trial_id,)
            ).fetchone()
            if row is not None:
                yield row[0]
