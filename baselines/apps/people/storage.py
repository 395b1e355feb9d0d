"""Durable study storage in SQLite: participants, their assigned episodes, every turn as it happens.

Each turn is committed before the server answers (WAL journal, `synchronous=FULL`), so stopping the
server loses nothing; a turn that could not be stored is not shown either (the game in memory is
dropped and rebuilt from the store); a participant who comes back resumes the episode where it stood, rebuilt by
replaying the stored turns into a fresh env (`HumanGame.replay`).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
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


class StaleTurns(Exception):
    """The stored conversation is not the one in memory (another server, or a failed write)."""


class AlreadyAnswered(Exception):
    """A participant's answers are stored once."""


class StudyStore:
    """One study's SQLite file; safe to use from the server's threads, and from several servers:
    every write is one `BEGIN IMMEDIATE` transaction that checks what it builds on."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # another server's write transaction is waited for, not reported as "database is locked"
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30.0)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite may have rolled back itself (a full disk)
                    self._db.execute("ROLLBACK")
                raise

    def _write(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        with self._transaction() as db:
            db.executemany(sql, rows)

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ---- participants -------------------------------------------------------------------------

    def enrol(self, participant: str, assignments_of: Callable[[int], list[tuple[str, str, int]]]) -> str:
        """Creates the participant with a new secret token, at the next position, and their
        episodes (`assignments_of(position)`: condition, scenario, seed); an enrolled participant
        keeps theirs. Returns the token."""
        with self._transaction() as db:
            existing = db.execute("SELECT token FROM participants WHERE id = ?", (participant,)).fetchone()
            if existing:
                return existing["token"]
            token = secrets.token_urlsafe(16)
            position = db.execute("SELECT COUNT(*) AS n FROM participants").fetchone()["n"]
            db.execute(
                "INSERT INTO participants (id, token, position) VALUES (?, ?, ?)", (participant, token, position)
            )
            db.executemany(
                "INSERT INTO episodes (participant, slot, condition, scenario, seed) VALUES (?, ?, ?, ?, ?)",
                [(participant, slot, c, s, seed) for slot, (c, s, seed) in enumerate(assignments_of(position))],
            )
        return token

    def participants(self) -> list[dict[str, Any]]:
        rows = [dict(row) for row in self._read("SELECT * FROM participants ORDER BY position")]
        for row in rows:
            row["answers"] = json.loads(row["answers"]) if row["answers"] else None
        return rows

    def token_of(self, participant: str) -> str | None:
        rows = self._read("SELECT token FROM participants WHERE id = ?", (participant,))
        return rows[0]["token"] if rows else None

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
        """Stores the answers once; raises `AlreadyAnswered` when they are stored already."""
        with self._transaction() as db:
            changed = db.execute(
                "UPDATE participants SET answers = ?, finished_at = ? WHERE id = ? AND answers IS NULL",
                (json.dumps(answers), time.time(), participant),
            ).rowcount
            if changed != 1:
                raise AlreadyAnswered(participant)

    # ---- episodes and turns -------------------------------------------------------------------

    def episodes(self, participant: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM episodes", ()
        if participant is not None:
            sql, args = sql + " WHERE participant = ?", (participant,)
        rows = [dict(row) for row in self._read(sql + " ORDER BY participant, slot", args)]
        for row in rows:
            row["record"] = json.loads(row["record"]) if row["record"] else None
        return rows

    def add_turns(
        self,
        participant: str,
        slot: int,
        start: int,
        entries: list[dict[str, Any]],
        record: dict[str, Any] | None = None,
    ) -> None:
        """Stores log entries from position `start` on, and the episode's record when it is over,
        in one transaction; raises `StaleTurns` when the store holds other than `start` turns."""
        now = time.time()
        with self._transaction() as db:
            held = db.execute(
                "SELECT COUNT(*) AS n FROM turns WHERE participant = ? AND slot = ?", (participant, slot)
            ).fetchone()["n"]
            status = db.execute(
                "SELECT status FROM episodes WHERE participant = ? AND slot = ?", (participant, slot)
            ).fetchone()
            if held != start or status is None or status["status"] == "done":
                raise StaleTurns(f"{participant} slot {slot}: {held} turns stored, {start} expected")
            db.executemany(
                "INSERT INTO turns (participant, slot, position, side, message, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                [(participant, slot, start + i, e["side"], json.dumps(e), now) for i, e in enumerate(entries)],
            )
            if record is not None:
                db.execute(
                    "UPDATE episodes SET status = 'done', record = ? WHERE participant = ? AND slot = ?",
                    (json.dumps(record, default=str), participant, slot),
                )
            elif entries:
                db.execute(
                    "UPDATE episodes SET status = 'playing' WHERE participant = ? AND slot = ? AND status = 'assigned'",
                    (participant, slot),
                )

    def turns(self, participant: str, slot: int) -> list[dict[str, Any]]:
        rows = self._read(
            "SELECT message FROM turns WHERE participant = ? AND slot = ? ORDER BY position", (participant, slot)
        )
        return [json.loads(row["message"]) for row in rows]

    def all_turns(self) -> int:
        return self._read("SELECT COUNT(*) AS n FROM turns")[0]["n"]
