"""`SqliteEntries`: the BudgetedMap policy (storage/budget.py) in SQL, operation for
operation the same as `RedisEntries`' Lua script (storage/lua/entries.lua):
tests/storage/test_entries.py runs all three backends on the same random operations and
expects identical answers. Each operation is one `BEGIN IMMEDIATE` transaction on the
`Database` (sqlite_database.py), so writers from any number of processes are serialized by
SQLite's write lock and the budgets hold exactly at the edges. A read is a write too (it
refreshes LRU recency).
"""

from __future__ import annotations

import sqlite3
from typing import Callable, Sequence, TypeVar

import trio

from .budget import BudgetStatistics, Evictions
from .sqlite_database import Database
from .values import StoreKind, Values

T = TypeVar("T")

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
