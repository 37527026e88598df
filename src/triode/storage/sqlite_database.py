"""The embedded store (`--store sqlite:///PATH`): one SQLite file (the standard library's
`sqlite3`, WAL mode) holding the stores' entries (sqlite_entries.py), the job board and the
limits' counters (sqlite.py), shared by every process of one machine that names it. This
module is the file: its schema, its connection and the transactions every operation runs in.

Threads: each process holds one connection per database file (`Database`), used from trio's
worker threads one call at a time (`Database.limiter`, a CapacityLimiter(1) shared by the
three stores and the job board). Every operation takes the one write lock SQLite has per
file, so more connections in a process would only queue on that lock inside SQLite (busy
retries, with sleeps) instead of in trio, where a waiting request stays cancellable.

Durability: `synchronous=NORMAL` by default: in WAL mode a committed transaction is in the
WAL file (the OS has it) before `commit` returns, so a killed process (SIGKILL, a crash)
loses nothing it committed; only a power loss or OS crash can lose the last transactions
(the database stays consistent). `?synchronous=full` fsyncs the WAL at every commit (with
`fullfsync`, so that on macOS it reaches the disk), which survives power loss too, at the
cost of an fsync per store operation (reads included); docs/benchmarks.md measures both.

Faults: a database that cannot be opened at startup (no such directory, unwritable, not a
database, locked) is `SqliteOpenError`, which system.py reports as a one-line startup error.
At run time every sqlite3 OperationalError/DatabaseError (locked past the busy timeout, disk
full, I/O error) is StoreUnavailable: a 503 with Retry-After, as an unreachable Redis. After
a call gave up on a locked database, calls fail at once for BUSY_BACKOFF_SECS, so requests
queued behind it answer 503 promptly instead of each waiting out the busy timeout.

Times are wall-clock seconds (`time.time()`, read inside the transaction) when `now` is
None: every process on one machine shares that clock.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

import trio

from ..errors import StoreUnavailable
from .values import StoreOpenError

T = TypeVar("T")


# How long an operation waits for another process's write lock before it gives up (then
# StoreUnavailable), as a Redis call gives up after REDIS_TIMEOUT_SECS.
BUSY_TIMEOUT_SECS = 2.0
# After a call gave up on a locked database, calls fail at once for this long.
BUSY_BACKOFF_SECS = 1.0
SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
-- One row per entry of a store. Ordinary entries have `used` (a recency tick: the least
-- recently used has the smallest) and, with a TTL, `expires` (inserted + ttl); pinned
-- entries (active background jobs) are outside TTL and LRU: expires is NULL.
CREATE TABLE IF NOT EXISTS entries (
    store TEXT NOT NULL, key TEXT NOT NULL, pinned INTEGER NOT NULL, size INTEGER NOT NULL,
    inserted REAL NOT NULL, ttl REAL NOT NULL, expires REAL, used INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (store, key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_lru ON entries (store, pinned, used);
CREATE INDEX IF NOT EXISTS entries_expiry ON entries (store, expires)
    WHERE expires IS NOT NULL;
-- An entry's values, in order (a response: body, events; a conversation: object, items).
CREATE TABLE IF NOT EXISTS vals (
    id INTEGER PRIMARY KEY, store TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS vals_of ON vals (store, key, id);
-- The item index: an item id names the entry holding it (item_reference, FindItem).
CREATE TABLE IF NOT EXISTS items (
    store TEXT NOT NULL, item_id TEXT NOT NULL, key TEXT NOT NULL,
    PRIMARY KEY (store, item_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_of ON items (store, key);
CREATE TABLE IF NOT EXISTS stats (
    store TEXT PRIMARY KEY, entries INTEGER NOT NULL, pinned_entries INTEGER NOT NULL,
    bytes INTEGER NOT NULL, pinned_bytes INTEGER NOT NULL, ev_ttl INTEGER NOT NULL,
    ev_lru INTEGER NOT NULL, ev_bytes INTEGER NOT NULL, ev_oversize INTEGER NOT NULL,
    ev_deleted INTEGER NOT NULL, tick INTEGER NOT NULL) WITHOUT ROWID;
-- The job board (storage/sqlite.py): processes' leases, job owners, cancel requests, events.
CREATE TABLE IF NOT EXISTS workers (
    board TEXT NOT NULL, worker_id TEXT NOT NULL, token TEXT NOT NULL, expires REAL NOT NULL,
    PRIMARY KEY (board, worker_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS jobs (
    board TEXT NOT NULL, response_id TEXT NOT NULL, owner TEXT NOT NULL,
    cancel INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (board, response_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS job_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, board TEXT NOT NULL, response_id TEXT NOT NULL,
    event TEXT NOT NULL, added REAL NOT NULL);
CREATE INDEX IF NOT EXISTS job_events_of ON job_events (board, response_id, id);
-- Tenants' limits (storage/sqlite.py): counting windows and concurrency tickets.
CREATE TABLE IF NOT EXISTS limit_windows (
    prefix TEXT NOT NULL, name TEXT NOT NULL, count INTEGER NOT NULL, closes REAL NOT NULL,
    PRIMARY KEY (prefix, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS limit_tickets (
    prefix TEXT NOT NULL, name TEXT NOT NULL, ticket TEXT NOT NULL, expires REAL NOT NULL,
    PRIMARY KEY (prefix, name, ticket)) WITHOUT ROWID;
"""


class SqliteOpenError(StoreOpenError):
    """The database cannot be opened; the message says why, in a few words."""


class Database:
    """One process's connection to one database file; blocking calls, serialized."""

    def __init__(self, path: str, *, synchronous: str = "normal",
                 busy_timeout: float = BUSY_TIMEOUT_SECS) -> None:
        self.path = path
        self.synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._busy_until = 0.0
        self._limiter: trio.CapacityLimiter | None = None

    @property
    def limiter(self) -> trio.CapacityLimiter:
        """The one worker thread at a time that uses the connection (made in trio)."""
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(1)
        return self._limiter

    def open(self) -> None:
        """Opens (creating if needed) the database in WAL mode with its schema. Raises
        SqliteOpenError with the reason a person can act on."""
        path = Path(self.path)
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise SqliteOpenError(f"the directory {str(parent)!r} does not exist")
        if path.is_dir():
            raise SqliteOpenError(f"{self.path!r} is a directory")
        try:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout,
                                   isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise SqliteOpenError(self._open_failure(exc)) from None
        # Processes opening a new file at once (hypercorn's workers) can meet in the switch
        # to WAL, where SQLite answers "locked" at once instead of waiting: retried.
        deadline = time.monotonic() + self._busy_timeout
        try:
            while True:
                try:
                    self._prepare(conn)
                    break
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc) or time.monotonic() >= deadline:
                        raise
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    time.sleep(0.02)
        except SqliteOpenError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise SqliteOpenError(self._open_failure(exc)) from None
        self._conn = conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """WAL mode, the synchronous setting and the schema (created, or checked)."""
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise SqliteOpenError(f"cannot use WAL mode on {self.path!r} (got {mode})")
        conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
        if self.synchronous == "full":      # macOS: an fsync that reaches the disk
            conn.execute("PRAGMA fullfsync=ON")
        conn.execute("BEGIN IMMEDIATE")
        for statement in _statements(SCHEMA):
            conn.execute(statement)
        found = conn.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
        if found is None:
            conn.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif int(found[0]) != SCHEMA_VERSION:
            conn.execute("ROLLBACK")
            raise SqliteOpenError(f"{self.path!r} has schema version {found[0]}, this "
                                  f"triode uses {SCHEMA_VERSION}")
        conn.execute("COMMIT")

    def _open_failure(self, exc: sqlite3.Error) -> str:
        text = str(exc)
        parent = str(Path(self.path).parent) or "."
        if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
            return (f"the database {self.path!r} is locked by another process (gave up after "
                    f"{self._busy_timeout:g} s)")
        if "not a database" in text:
            return f"{self.path!r} is not a SQLite database"
        if "readonly" in text or "read-only" in text:
            return f"{self.path!r} is read-only"
        if "unable to open" in text:
            if not os.access(parent, os.W_OK):
                return f"cannot create {self.path!r}: the directory {parent!r} is not writable"
            return f"cannot open or create {self.path!r} (is its directory writable?)"
        return f"{self.path!r}: {text}"

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def write(self, fn: Callable[[sqlite3.Connection, float], T], now: float | None) -> T:
        """Runs `fn(connection, now)` in one IMMEDIATE (write-locked) transaction and commits
        it before returning: what returned is on disk (module docstring)."""
        return self._run(fn, now, "BEGIN IMMEDIATE")

    def read(self, fn: Callable[[sqlite3.Connection, float], T]) -> T:
        """Runs `fn` in one read transaction (a consistent snapshot; takes no write lock)."""
        return self._run(fn, None, "BEGIN DEFERRED")

    def _run(self, fn: Callable[[sqlite3.Connection, float], T], now: float | None,
             begin: str) -> T:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreUnavailable("the store (SQLite) is closed")
            if time.monotonic() < self._busy_until:
                raise StoreUnavailable(f"the store (SQLite) is locked by another process: "
                                       f"{self.path}")
            try:
                conn.execute(begin)
                try:
                    result = fn(conn, time.time() if now is None else now)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        try:
                            conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    raise
            except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
                if isinstance(exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError)):
                    raise
                text = str(exc)
                if _is_busy(exc):
                    self._busy_until = time.monotonic() + BUSY_BACKOFF_SECS
                raise StoreUnavailable(f"the store (SQLite) is unavailable: {text}") from None
            return result

    def ping(self) -> None:
        """Raises StoreUnavailable unless a small write commits now: the database is not
        locked out by another process and its disk is not full (a stored create asks
        first, so that it is refused before any generation)."""
        self.write(lambda conn, now: conn.execute(
            "INSERT OR REPLACE INTO meta VALUES ('ping', ?)", (repr(now),)), None)


def _is_busy(exc: sqlite3.Error) -> bool:
    """Another connection holds the lock (SQLITE_BUSY / SQLITE_LOCKED)."""
    text = str(exc)
    return "locked" in text or "busy" in text


def _statements(script: str) -> list[str]:
    """The schema's statements (executescript would commit the open transaction)."""
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
