"""The SQLite backend (`--store sqlite:///PATH`): the stores' entries (sqlite_entries.py),
the job board and the tenants' limits counters, all in one database file
(sqlite_database.py), under one name (the store prefix).
"""

from __future__ import annotations

import sqlite3
from typing import Sequence

import attrs
import trio

from .sqlite_database import Database
from .sqlite_entries import SqliteEntries
from .values import TICKET_LEASE_SECS, WINDOW_SECS, StoreKind, Window


@attrs.frozen
class SqliteBackend:
    """Every store under `prefix` in one SQLite database (one connection per process, its
    calls one at a time on `Database.limiter`)."""

    db: Database
    prefix: str = "triode"
    kind: StoreKind = "sqlite"

    def open(self) -> None:
        """Opens (creating if needed) the file; SqliteOpenError says why it cannot."""
        self.db.open()

    def describe(self) -> str:
        return f"{self.db.path}, synchronous={self.db.synchronous}, prefix {self.prefix!r}"

    def entries(self, name: str, *, max_entries: int, max_bytes: int, ttl_secs: float
                ) -> SqliteEntries:
        return SqliteEntries(self.db, f"{self.prefix}:{name}", max_entries=max_entries,
                             max_bytes=max_bytes, ttl_secs=ttl_secs)

    def board(self) -> "SqliteBoard":
        return SqliteBoard(self.db, self.prefix)

    def counters(self) -> "SqliteCounters":
        return SqliteCounters(self.db, self.prefix)

    def limiter(self) -> trio.CapacityLimiter:
        return self.db.limiter

    def close(self) -> None:
        self.db.close()


class SqliteBoard:
    """The job board's blocking operations (actors/jobs.py) on the database: the `workers`
    leases, the `jobs` owners with their cancel flag, and `job_events`, under one board
    name (the store prefix). There are no notifications: followers and owners poll
    (service/remote.py FOLLOW_POLL_SECS; the board's `cancel_wait_secs`)."""

    # How long the board's poll for cancels sleeps between queries (0 for Redis, whose
    # pub/sub read waits by itself).
    cancel_wait_secs = 0.1

    def __init__(self, db: Database, name: str) -> None:
        self._db = db
        self.name = name

    @property
    def limiter(self) -> trio.CapacityLimiter:
        return self._db.limiter

    def heartbeat(self, worker_id: str, token: str, lease_secs: float) -> None:
        self._db.write(lambda c, now: c.execute(
            "INSERT OR REPLACE INTO workers VALUES (?, ?, ?, ?)",
            (self.name, worker_id, token, now + lease_secs)), None)

    def claim(self, response_id: str, worker_id: str) -> None:
        self._db.write(lambda c, now: c.execute(
            "INSERT OR REPLACE INTO jobs (board, response_id, owner) VALUES (?, ?, ?)",
            (self.name, response_id, worker_id)), None)

    def owner(self, response_id: str) -> str | None:
        row = self._db.read(lambda c, now: c.execute(
            "SELECT owner FROM jobs WHERE board = ? AND response_id = ?",
            (self.name, response_id)).fetchone())
        return None if row is None else str(row[0])

    def worker(self, worker_id: str) -> str | None:
        """A worker's process token while its lease runs, else None."""
        row = self._db.read(lambda c, now: c.execute(
            "SELECT token FROM workers WHERE board = ? AND worker_id = ? AND expires > ?",
            (self.name, worker_id, now)).fetchone())
        return None if row is None else str(row[0])

    def events(self, response_id: str, after: str) -> list[tuple[str, bytes]]:
        start = 0 if after == "-" else int(after)
        rows = self._db.read(lambda c, now: c.execute(
            "SELECT id, event FROM job_events WHERE board = ? AND response_id = ? AND id > ? "
            "ORDER BY id", (self.name, response_id, start)).fetchall())
        return [(str(i), e.encode() if isinstance(e, str) else bytes(e)) for i, e in rows]

    def add_events(self, response_id: str, events: Sequence[bytes]) -> None:
        self._db.write(lambda c, now: c.executemany(
            "INSERT INTO job_events (board, response_id, event, added) VALUES (?, ?, ?, ?)",
            [(self.name, response_id, e.decode(), now) for e in events]), None)

    def request_cancel(self, response_id: str) -> None:
        self._db.write(lambda c, now: c.execute(
            "UPDATE jobs SET cancel = 1 WHERE board = ? AND response_id = ?",
            (self.name, response_id)), None)

    def take_cancels(self, worker_id: str) -> list[str]:
        """The jobs of this worker whose cancel was asked for since the last call."""
        def take(c: sqlite3.Connection, now: float) -> list[str]:
            asked = [str(r) for (r,) in c.execute(
                "SELECT response_id FROM jobs WHERE board = ? AND owner = ? AND cancel = 1",
                (self.name, worker_id))]
            if asked:
                c.execute("UPDATE jobs SET cancel = 2 WHERE board = ? AND owner = ? AND "
                          "cancel = 1", (self.name, worker_id))
            return asked
        # Most polls find nothing: a read first, so that they take no write lock.
        if self._db.read(lambda c, now: c.execute(
                "SELECT 1 FROM jobs WHERE board = ? AND owner = ? AND cancel = 1 LIMIT 1",
                (self.name, worker_id)).fetchone()) is None:
            return []
        return self._db.write(take, None)

    def cancels(self, worker_id: str) -> "_Cancels":
        return _Cancels(self, worker_id)

    def release(self, response_id: str) -> bool:
        return bool(self._db.write(lambda c, now: c.execute(
            "DELETE FROM jobs WHERE board = ? AND response_id = ?",
            (self.name, response_id)).rowcount, None))

    def jobs(self) -> list[str]:
        return [str(r) for (r,) in self._db.read(lambda c, now: c.execute(
            "SELECT response_id FROM jobs WHERE board = ?", (self.name,)).fetchall())]

    def tidy(self, events_keep_secs: float) -> None:
        """Forgets the events of jobs no process runs, EVENTS_KEEP_SECS after their last one
        (as the Redis Stream's expiry), and workers whose lease ran out an hour ago."""
        def tidy(c: sqlite3.Connection, now: float) -> None:
            c.execute("DELETE FROM job_events WHERE board = ?1 AND response_id IN ("
                      "SELECT response_id FROM job_events WHERE board = ?1 "
                      "GROUP BY response_id HAVING max(added) < ?2) AND response_id NOT IN ("
                      "SELECT response_id FROM jobs WHERE board = ?1)",
                      (self.name, now - events_keep_secs))
            c.execute("DELETE FROM workers WHERE board = ? AND expires < ?",
                      (self.name, now - 3600))
        self._db.write(tidy, None)



@attrs.frozen
class _Cancels:
    """No notifications in SQLite: the owner's flagged jobs, by query (the board polls)."""

    board: SqliteBoard
    worker_id: str

    def take(self) -> list[str]:
        return self.board.take_cancels(self.worker_id)

    def close(self) -> None:
        pass



class SqliteCounters:
    """The limits' counters: rows of limit_windows and limit_tickets under the store prefix."""

    def __init__(self, db: Database, prefix: str) -> None:
        self._db = db
        self._prefix = prefix
        self.limiter: trio.CapacityLimiter | None = db.limiter

    def _window(self, c: sqlite3.Connection, name: str, now: float) -> tuple[int, float]:
        row = c.execute("SELECT count, closes FROM limit_windows WHERE prefix = ? AND "
                        "name = ?", (self._prefix, name)).fetchone()
        if row is None or row[1] <= now:
            return 0, now + WINDOW_SECS
        return int(row[0]), float(row[1])

    def _set(self, c: sqlite3.Connection, name: str, count: int, closes: float) -> None:
        c.execute("INSERT OR REPLACE INTO limit_windows VALUES (?, ?, ?, ?)",
                  (self._prefix, name, count, closes))

    def hit(self, name: str, limit: int, now: float) -> Window:
        def op(c: sqlite3.Connection, now: float) -> Window:
            count, closes = self._window(c, name, now)
            admitted = count < limit
            if admitted:
                count += 1
                self._set(c, name, count, closes)
            return Window(admitted, count, closes - now)
        return self._db.write(op, now)

    def peek(self, name: str, now: float) -> Window:
        def op(c: sqlite3.Connection, _: float) -> Window:
            count, closes = self._window(c, name, now)
            return Window(True, count, closes - now)
        return self._db.read(op)

    def charge(self, name: str, amount: int, now: float) -> None:
        def op(c: sqlite3.Connection, now: float) -> None:
            count, closes = self._window(c, name, now)
            self._set(c, name, count + amount, closes)
        self._db.write(op, now)

    def acquire(self, name: str, ticket: str, limit: int, now: float) -> Window:
        def op(c: sqlite3.Connection, now: float) -> Window:
            c.execute("DELETE FROM limit_tickets WHERE prefix = ? AND name = ? AND "
                      "expires <= ?", (self._prefix, name, now))
            held = c.execute("SELECT COUNT(*) FROM limit_tickets WHERE prefix = ? AND "
                             "name = ?", (self._prefix, name)).fetchone()[0]
            if held >= limit:
                return Window(False, held, 0.0)
            c.execute("INSERT INTO limit_tickets VALUES (?, ?, ?, ?)",
                      (self._prefix, name, ticket, now + TICKET_LEASE_SECS))
            return Window(True, held + 1, 0.0)
        return self._db.write(op, now)

    def renew(self, tickets: list[tuple[str, str]], now: float) -> None:
        def op(c: sqlite3.Connection, now: float) -> None:
            c.executemany("UPDATE limit_tickets SET expires = ? WHERE prefix = ? AND "
                          "name = ? AND ticket = ?",
                          [(now + TICKET_LEASE_SECS, self._prefix, n, t) for n, t in tickets])
        self._db.write(op, now)

    def release(self, name: str, ticket: str) -> None:
        self._db.write(lambda c, now: c.execute(
            "DELETE FROM limit_tickets WHERE prefix = ? AND name = ? AND ticket = ?",
            (self._prefix, name, ticket)), None)
