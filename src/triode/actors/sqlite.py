"""The embedded store (`--store sqlite:///PATH`): one SQLite file (the standard library's
`sqlite3`, WAL mode) holding the stores' entries and the job board, shared by every process
of one machine that names it.

`SqliteEntries` is the BudgetedMap policy (actors/budget.py) in SQL, operation for
operation the same as `RedisEntries`' Lua script (actors/entries.lua):
tests/actors/test_entries.py runs all three backends on the same random operations and
expects identical answers. Each operation is one `BEGIN IMMEDIATE` transaction, so writers
from any number of processes are serialized by SQLite's write lock and the budgets hold
exactly at the edges. A read is a write too (it refreshes LRU recency).

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
from typing import Callable, Sequence, TypeVar

import attrs
import trio

from ..errors import StoreUnavailable
from .budget import BudgetStatistics, Evictions
from .entries import StoreKind, Values

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
-- The job board (actors/jobs.py): processes' leases, job owners, cancel requests, events.
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
-- Tenants' limits (actors/limits.py): counting windows and concurrency tickets.
CREATE TABLE IF NOT EXISTS limit_windows (
    prefix TEXT NOT NULL, name TEXT NOT NULL, count INTEGER NOT NULL, closes REAL NOT NULL,
    PRIMARY KEY (prefix, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS limit_tickets (
    prefix TEXT NOT NULL, name TEXT NOT NULL, ticket TEXT NOT NULL, expires REAL NOT NULL,
    PRIMARY KEY (prefix, name, ticket)) WITHOUT ROWID;
"""


class SqliteOpenError(Exception):
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


# ---- the entries ---------------------------------------------------------------------------

_STATS = ("entries", "pinned_entries", "bytes", "pinned_bytes", "ev_ttl", "ev_lru",
          "ev_bytes", "ev_oversize", "ev_deleted", "tick")


class _Op:
    """One operation's transaction: the store's statistics row loaded once, written back at
    the end; the helpers are the Lua script's, one for one."""

    def __init__(self, entries: "SqliteEntries", conn: sqlite3.Connection, now: float):
        self.e, self.c, self.now, self.s = entries, conn, now, entries.name
        row = conn.execute(f"SELECT {', '.join(_STATS)} FROM stats WHERE store = ?",
                           (self.s,)).fetchone()
        self.st: dict[str, int] = dict(zip(_STATS, row or (0,) * len(_STATS)))
        self._saved = dict(self.st) if row is not None else None

    def save(self) -> None:
        if self.st == self._saved:
            return
        self.c.execute(f"INSERT OR REPLACE INTO stats (store, {', '.join(_STATS)}) VALUES "
                       f"(?, {', '.join('?' * len(_STATS))})",
                       (self.s, *(self.st[f] for f in _STATS)))

    def meta(self, k: str) -> tuple[int, int, float, float, int] | None:
        """(pinned, size, inserted, ttl, number of values) of an entry, None if absent."""
        row = self.c.execute("SELECT pinned, size, inserted, ttl, n FROM entries "
                             "WHERE store = ? AND key = ?", (self.s, k)).fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3], row[4])

    def forget(self, k: str) -> None:
        self.c.execute("DELETE FROM items WHERE store = ? AND key = ?", (self.s, k))

    def drop(self, k: str) -> None:
        self.c.execute("DELETE FROM entries WHERE store = ? AND key = ?", (self.s, k))
        self.c.execute("DELETE FROM vals WHERE store = ? AND key = ?", (self.s, k))

    def remove_ordinary(self, k: str, size: int) -> None:
        self.drop(k)
        self.st["bytes"] -= size
        self.st["entries"] -= 1
        self.forget(k)

    def discard(self, k: str) -> None:
        found = self.meta(k)
        if found is None:
            return
        if found[0]:
            self.drop(k)
            self.st["pinned_bytes"] -= found[1]
            self.st["pinned_entries"] -= 1
            self.forget(k)
        else:
            self.remove_ordinary(k, found[1])

    def live(self, k: str) -> str | None:
        """'pinned', 'ordinary' or None; an expired ordinary entry is dropped (TTL)."""
        found = self.meta(k)
        if found is None:
            return None
        pinned, size, inserted, ttl, _ = found
        if pinned:
            return "pinned"
        if ttl > 0 and self.now >= inserted + ttl:
            self.remove_ordinary(k, size)
            self.st["ev_ttl"] += 1
            return None
        return "ordinary"

    def touch(self, k: str) -> None:
        self.st["tick"] += 1
        self.c.execute("UPDATE entries SET used = ? WHERE store = ? AND key = ?",
                       (self.st["tick"], self.s, k))

    def drop_expired(self) -> int:
        expired = self.c.execute("SELECT key, size FROM entries WHERE store = ? AND "
                                 "expires IS NOT NULL AND expires <= ?",
                                 (self.s, self.now)).fetchall()
        for k, size in expired:
            self.remove_ordinary(k, size)
            self.st["ev_ttl"] += 1
        return len(expired)

    def evict_oldest(self, cause: str) -> None:
        k, size = self.c.execute("SELECT key, size FROM entries WHERE store = ? AND pinned = 0 "
                                 "ORDER BY used LIMIT 1", (self.s,)).fetchone()
        self.remove_ordinary(k, size)
        self.st["ev_" + cause] += 1

    def evict_to_fit(self) -> None:
        self.drop_expired()
        while self.st["entries"] > self.e.max_entries:
            self.evict_oldest("lru")
        while self.st["bytes"] > self.e.max_bytes:
            self.evict_oldest("bytes")

    def push(self, k: str, values: Sequence[bytes]) -> None:
        self.c.executemany("INSERT INTO vals (store, key, value) VALUES (?, ?, ?)",
                           [(self.s, k, bytes(v)) for v in values])

    def values(self, k: str) -> Values:
        return [bytes(v) for (v,) in self.c.execute(
            "SELECT value FROM vals WHERE store = ? AND key = ? ORDER BY id", (self.s, k))]

    def admit(self, k: str, size: int, ttl: float, values: Sequence[bytes] | None) -> bool:
        """An ordinary entry as the newest, then evict until the budgets hold. `values`: a
        new entry's (None: the row exists, an unpinned entry)."""
        max_bytes = self.e.max_bytes
        if max_bytes == 0 or size > max_bytes:
            self.st["ev_bytes" if max_bytes == 0 else "ev_oversize"] += 1
            if values is None:
                self.drop(k)
                self.forget(k)
            return False
        expires = self.now + ttl if ttl > 0 else None
        if values is None:
            self.c.execute("UPDATE entries SET pinned = 0, inserted = ?, expires = ? "
                           "WHERE store = ? AND key = ?", (self.now, expires, self.s, k))
        else:
            self.c.execute("INSERT INTO entries VALUES (?, ?, 0, ?, ?, ?, ?, 0, ?)",
                           (self.s, k, size, self.now, ttl, expires, len(values)))
            self.push(k, values)
        self.touch(k)
        self.st["bytes"] += size
        self.st["entries"] += 1
        self.evict_to_fit()
        found = self.meta(k)
        return found is not None and not found[0]

    def put(self, k: str, values: Sequence[bytes], size: int, pinned: bool,
            ttl: float) -> bool:
        self.discard(k)
        if pinned:
            if self.st["pinned_bytes"] + size > self.e.max_bytes:
                return False
            self.c.execute("INSERT INTO entries VALUES (?, ?, 1, ?, ?, ?, NULL, 0, ?)",
                           (self.s, k, size, self.now, ttl, len(values)))
            self.push(k, values)
            self.st["pinned_bytes"] += size
            self.st["pinned_entries"] += 1
            return True
        return self.admit(k, size, ttl, values)

    def extend(self, k: str, state: str | None, items: Sequence[bytes], size: int) -> bool:
        """Grows (or, with a negative size and no items, shrinks) an entry in place."""
        found = self.meta(k)
        assert found is not None and state is not None
        _, current, _, _, n = found
        growth = size + _commas(n, len(items))
        if state == "pinned":
            if self.st["pinned_bytes"] + growth > self.e.max_bytes:
                return False
            self.st["pinned_bytes"] += growth
        elif current + growth > self.e.max_bytes:
            self.remove_ordinary(k, current)
            self.st["ev_oversize"] += 1
            return False
        else:
            self.st["bytes"] += growth
            self.touch(k)
        self.push(k, items)
        self.c.execute("UPDATE entries SET size = size + ?, n = n + ? WHERE store = ? AND "
                       "key = ?", (growth, len(items), self.s, k))
        self.evict_to_fit()
        return True

    def read(self, k: str) -> Values | None:
        state = self.live(k)
        if state is None:
            return None
        if state == "ordinary":
            self.touch(k)
        return self.values(k)


def _commas(existing: int, n: int) -> int:
    """Commas a JSON list of `existing` values gains when `n` are appended."""
    if n == 0:
        return 0
    return n if existing > 0 else n - 1


class SqliteEntries:
    """The BudgetedMap policy in one SQLite file; every operation is one transaction."""

    blocking = True
    kind: StoreKind = "sqlite"

    def __init__(self, db: Database, name: str, *, max_entries: int, max_bytes: int,
                 ttl_secs: float) -> None:
        self._db = db
        self.name = name
        self.max_entries, self.max_bytes, self.ttl_secs = max_entries, max_bytes, ttl_secs

    @property
    def limiter(self) -> trio.CapacityLimiter:
        return self._db.limiter

    def _op(self, body: Callable[[_Op], T], now: float | None) -> T:
        def run(conn: sqlite3.Connection, t: float) -> T:
            op = _Op(self, conn, t)
            result = body(op)
            op.save()
            return result
        return self._db.write(run, now)

    def put(self, key: str, values: Sequence[bytes], now: float | None, *, size: int,
            pinned: bool = False, ttl_secs: float | None = None,
            index: Sequence[str] = ()) -> bool:
        ttl = self.ttl_secs if ttl_secs is None else ttl_secs

        def put(op: _Op) -> bool:
            kept = op.put(key, values, size, pinned, ttl)
            if kept and index:
                op.c.executemany("INSERT OR REPLACE INTO items VALUES (?, ?, ?)",
                                 [(self.name, item_id, key) for item_id in index])
            return kept
        return self._op(put, now)

    def get(self, key: str, now: float | None) -> Values | None:
        return self._op(lambda op: op.read(key), now)

    def find(self, item_id: str, now: float | None) -> Values | None:
        def find(op: _Op) -> Values | None:
            owner = op.c.execute("SELECT key FROM items WHERE store = ? AND item_id = ?",
                                 (self.name, item_id)).fetchone()
            return None if owner is None else op.read(owner[0])
        return self._op(find, now)

    def append(self, key: str, items: Sequence[bytes], now: float | None, *, size: int,
               first: bytes | None = None, create: bool = True) -> bool | None:
        def append(op: _Op) -> bool | None:
            state = op.live(key)
            if state is not None:
                return op.extend(key, state, items, size)
            if not create:
                return None
            values, total = list(items), size
            if first is not None:
                values, total = [first, *values], total + len(first)
            return op.put(key, values, 2 + _commas(0, len(values)) + total, False,
                          self.ttl_secs)
        return self._op(append, now)

    def set_first(self, key: str, value: bytes, now: float | None) -> bool:
        def set_first(op: _Op) -> bool:
            state = op.live(key)
            if state is None:
                return False
            if state == "ordinary":
                op.touch(key)
            row = op.c.execute("SELECT id, length(value) FROM vals WHERE store = ? AND "
                               "key = ? ORDER BY id LIMIT 1", (self.name, key)).fetchone()
            if row is None:
                return False
            op.c.execute("UPDATE vals SET value = ? WHERE id = ?", (value, row[0]))
            return op.extend(key, op.live(key), (), len(value) - row[1])
        return self._op(set_first, now)

    def remove_value(self, key: str, value: bytes, now: float | None) -> bool:
        def remove_value(op: _Op) -> bool:
            state = op.live(key)
            if state is None:
                return False
            if state == "ordinary":
                op.touch(key)
            row = op.c.execute(
                "SELECT id FROM vals WHERE store = ?1 AND key = ?2 AND value = ?3 AND id > "
                "(SELECT min(id) FROM vals WHERE store = ?1 AND key = ?2) ORDER BY id LIMIT 1",
                (self.name, key, value)).fetchone()
            if row is None:
                return False
            op.c.execute("DELETE FROM vals WHERE id = ?", (row[0],))
            op.c.execute("UPDATE entries SET n = n - 1 WHERE store = ? AND key = ?",
                         (self.name, key))
            return op.extend(key, op.live(key), (), -(len(value) + len(",")))
        return self._op(remove_value, now)

    def delete(self, key: str, now: float | None) -> bool:
        def delete(op: _Op) -> bool:
            if op.live(key) is None:
                return False
            op.discard(key)
            op.st["ev_deleted"] += 1
            return True
        return self._op(delete, now)

    def pin(self, key: str, now: float | None) -> bool:
        def pin(op: _Op) -> bool:
            state = op.live(key)
            if state is None:
                return False
            if state == "pinned":
                return True
            found = op.meta(key)
            assert found is not None
            size = found[1]
            if op.st["pinned_bytes"] + size > self.max_bytes:
                return False
            # as BudgetedMap.pin: out of the ordinary entries (forgetting its items)
            op.c.execute("UPDATE entries SET pinned = 1, expires = NULL WHERE store = ? AND "
                         "key = ?", (self.name, key))
            op.st["bytes"] -= size
            op.st["entries"] -= 1
            op.forget(key)
            op.st["pinned_bytes"] += size
            op.st["pinned_entries"] += 1
            return True
        return self._op(pin, now)

    def unpin(self, key: str, now: float | None) -> bool:
        def unpin(op: _Op) -> bool:
            found = op.meta(key)
            if found is None or not found[0]:
                return op.live(key) is not None
            op.st["pinned_bytes"] -= found[1]
            op.st["pinned_entries"] -= 1
            return op.admit(key, found[1], found[3], None)
        return self._op(unpin, now)

    def sweep(self, now: float | None) -> int:
        return self._op(lambda op: op.drop_expired(), now)

    def next_expiry(self) -> float | None:
        found = self._db.read(lambda conn, now: conn.execute(
            "SELECT min(expires) FROM entries WHERE store = ? AND expires IS NOT NULL",
            (self.name,)).fetchone())
        return None if found is None or found[0] is None else float(found[0])

    def statistics(self) -> BudgetStatistics:
        row = self._db.read(lambda conn, now: conn.execute(
            f"SELECT {', '.join(_STATS)} FROM stats WHERE store = ?", (self.name,)).fetchone())
        st = dict(zip(_STATS, row or (0,) * len(_STATS)))
        return BudgetStatistics(
            entries=st["entries"] + st["pinned_entries"],
            bytes=st["bytes"] + st["pinned_bytes"], pinned_entries=st["pinned_entries"],
            pinned_bytes=st["pinned_bytes"], max_entries=self.max_entries,
            max_bytes=self.max_bytes, ttl_secs=self.ttl_secs,
            evictions=Evictions(ttl=st["ev_ttl"], lru=st["ev_lru"], bytes=st["ev_bytes"],
                                oversize=st["ev_oversize"], deleted=st["ev_deleted"]))

    def contains(self, key: str) -> bool:
        return self._db.read(lambda conn, now: conn.execute(
            "SELECT 1 FROM entries WHERE store = ? AND key = ?", (self.name, key)
        ).fetchone()) is not None

    def ping(self) -> None:
        self._db.ping()

    def clear(self) -> int:
        """Deletes every entry of this store (tests); returns how many there were."""
        def clear(conn: sqlite3.Connection, now: float) -> int:
            n = conn.execute("DELETE FROM entries WHERE store = ?", (self.name,)).rowcount
            for table in ("vals", "items", "stats"):
                conn.execute(f"DELETE FROM {table} WHERE store = ?", (self.name,))
            return int(n)
        return self._db.write(clear, None)


# ---- the job board's state -------------------------------------------------------------------


class SqliteBoard:
    """The job board's blocking operations (actors/jobs.py) on the database: the `workers`
    leases, the `jobs` owners with their cancel flag, and `job_events`, under one board
    name (the store prefix). There are no notifications: followers and owners poll
    (service/jobs.py FOLLOW_POLL_SECS, jobs.py CANCEL_POLL_SECS)."""

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
