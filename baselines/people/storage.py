"""Durable study storage in SQLite: participants, their assigned episodes, every turn as it happens.

Each turn is committed before the server answers (WAL journal, `synchronous=FULL`), so stopping the
server loses nothing; a participant who comes back resumes the episode where it stood, rebuilt by
replaying the stored turns into a fresh env (`HumanGame.replay`).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS participants (
    id TEXT PRIMARY KEY, token TEXT NOT NULL, position INTEGER NOT NULL,
    consented_at REAL, finished_at REAL, answers TEXT
);
CREATE TABLE IF NOT EXISTS episodes (
    participant TEXT NOT NULL, slot INTEGER NOT NULL, condition TEXT NOT NULL, scenario TEXT NOT NULL,
    seed INTEGER NOT NULL, status TEXT NOT NULL DEFAULT 'assigned', record TEXT,
    PRIMARY KEY (participant, slot)
);
CREATE TABLE IF NOT EXISTS turns (
    participant TEXT NOT NULL, slot INTEGER NOT NULL, position INTEGER NOT NULL, side TEXT NOT NULL,
    message TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (participant, slot, position)
);
"""


class StudyStore:
    """One study's SQLite file; safe to use from the server's threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    def _write(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(sql, rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ---- participants -------------------------------------------------------------------------

    def enrol(self, participant: str, assignments: list[tuple[str, str, int]]) -> str:
        """Creates the participant with a new secret token and their episodes (condition, scenario,
        seed); an enrolled participant keeps theirs. Returns the token."""
        existing = self._read("SELECT token FROM participants WHERE id = ?", (participant,))
        if existing:
            return existing[0]["token"]
        token = secrets.token_urlsafe(16)
        position = self._read("SELECT COUNT(*) AS n FROM participants")[0]["n"]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT INTO participants (id, token, position) VALUES (?, ?, ?)", (participant, token, position)
            )
            self._db.executemany(
                "INSERT INTO episodes (participant, slot, condition, scenario, seed) VALUES (?, ?, ?, ?, ?)",
                [(participant, slot, c, s, seed) for slot, (c, s, seed) in enumerate(assignments)],
            )
            self._db.execute("COMMIT")
        return token

    def participants(self) -> list[dict[str, Any]]:
        rows = [dict(row) for row in self._read("SELECT * FROM participants ORDER BY position")]
        for row in rows:
            row["answers"] = json.loads(row["answers"]) if row["answers"] else None
        return rows

    def check_token(self, participant: str, token: str) -> bool:
        rows = self._read("SELECT token FROM participants WHERE id = ?", (participant,))
        return bool(rows) and secrets.compare_digest(rows[0]["token"], token)

    def participant(self, participant: str) -> dict[str, Any]:
        row = dict(self._read("SELECT * FROM participants WHERE id = ?", (participant,))[0])
        row["answers"] = json.loads(row["answers"]) if row["answers"] else None
        return row

    def consent(self, participant: str) -> None:
        self._write(
            "UPDATE participants SET consented_at = COALESCE(consented_at, ?) WHERE id = ?",
            [(time.time(), participant)],
        )

    def save_answers(self, participant: str, answers: dict[str, Any]) -> None:
        self._write(
            "UPDATE participants SET answers = ?, finished_at = ? WHERE id = ?",
            [(json.dumps(answers), time.time(), participant)],
        )

    # ---- episodes and turns -------------------------------------------------------------------

    def episodes(self, participant: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM episodes", ()
        if participant is not None:
            sql, args = sql + " WHERE participant = ?", (participant,)
        rows = [dict(row) for row in self._read(sql + " ORDER BY participant, slot", args)]
        for row in rows:
            row["record"] = json.loads(row["record"]) if row["record"] else None
        return rows

    def add_turns(self, participant: str, slot: int, start: int, entries: list[dict[str, Any]]) -> None:
        """Stores log entries from position `start` on; an entry stored already is kept as it was."""
        now = time.time()
        self._write(
            "INSERT OR IGNORE INTO turns (participant, slot, position, side, message, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(participant, slot, start + i, e["side"], json.dumps(e), now) for i, e in enumerate(entries)],
        )
        self._write(
            "UPDATE episodes SET status = 'playing' WHERE participant = ? AND slot = ? AND status = 'assigned'",
            [(participant, slot)],
        )

    def turns(self, participant: str, slot: int) -> list[dict[str, Any]]:
        rows = self._read(
            "SELECT message FROM turns WHERE participant = ? AND slot = ? ORDER BY position", (participant, slot)
        )
        return [json.loads(row["message"]) for row in rows]

    def finish_episode(self, participant: str, slot: int, record: dict[str, Any]) -> None:
        self._write(
            "UPDATE episodes SET status = 'done', record = ? WHERE participant = ? AND slot = ?",
            [(json.dumps(record, default=str), participant, slot)],
        )

    def all_turns(self) -> int:
        return self._read("SELECT COUNT(*) AS n FROM turns")[0]["n"]
