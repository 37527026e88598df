"""Where a store actor keeps its entries: in this process (`MemoryEntries`, a BudgetedMap), in
Redis (`RedisEntries`, the same policy as server-side Lua scripts) or in a SQLite file
(`SqliteEntries` in actors/sqlite.py, the same policy in SQL), behind one interface.

An entry's value is a list of byte strings (a stored response: its body and its events; a
conversation: its object, then its items; a reasoning echo: its text). Every method takes
`now`, the clock the policy runs on; `RedisEntries` also takes None, meaning the Redis
server's own clock, which is what keeps several processes on one store consistent
(`SqliteEntries`: the machine's wall clock, which its processes share).

`RedisEntries` holds the exact policy of `BudgetedMap` (TTL, LRU entry count, byte budget,
pinned entries, eviction counts by cause, the item index): tests/actors/test_entries.py runs
it and `SqliteEntries` against `MemoryEntries` on the same random operations and expects
identical answers. Each operation is one
Lua script call, atomic in Redis, so any number of processes may share one store. TTL is also
set as Redis expiry on the values (plus a grace period), so Redis frees an expired value even
when no triode process is left to sweep it.

Methods here block (the Redis ones do network I/O, the SQLite ones file I/O): store actors
run them in worker threads (`trio.to_thread`), never in the event loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Hashable, Literal, Protocol, Sequence

from ..errors import StoreUnavailable
from .budget import BudgetedMap, BudgetStatistics, Evictions

Values = list[bytes]
StoreKind = Literal["memory", "redis", "sqlite"]


class Entries(Protocol):
    """The operations the store actors need. `size` is what an entry counts against the
    byte budget; `index` names items a stored value holds, for `find`."""

    max_entries: int
    max_bytes: int
    ttl_secs: float
    blocking: bool      # whether calls do I/O (and must run in a worker thread)
    kind: StoreKind     # /health names it

    def put(self, key: str, values: Sequence[bytes], now: float | None, *, size: int,
            pinned: bool = False, ttl_secs: float | None = None,
            index: Sequence[str] = ()) -> bool: ...

    def get(self, key: str, now: float | None) -> Values | None: ...

    def find(self, item_id: str, now: float | None) -> Values | None: ...

    def append(self, key: str, items: Sequence[bytes], now: float | None, *, size: int,
               first: bytes | None = None, create: bool = True) -> bool | None:
        """Appends `items` (of `size` bytes) to a live entry, keeping its age. Absent: None
        if not `create`, else a new entry of `first` (if given) and the items."""
        ...

    def set_first(self, key: str, value: bytes, now: float | None) -> bool: ...

    def remove_value(self, key: str, value: bytes, now: float | None) -> bool: ...

    def delete(self, key: str, now: float | None) -> bool: ...

    def pin(self, key: str, now: float | None) -> bool: ...

    def unpin(self, key: str, now: float | None) -> bool: ...

    def sweep(self, now: float | None) -> int: ...

    def next_expiry(self) -> float | None: ...

    def statistics(self) -> BudgetStatistics: ...

    def contains(self, key: str) -> bool:
        """Whether `key` is retained, expired or not; not a use (for tests)."""
        ...

    def ping(self) -> None:
        """Raises StoreUnavailable unless the backend answers."""
        ...


class MemoryEntries:
    """A BudgetedMap of value lists, with the item index kept in step with it."""

    blocking = False
    kind: StoreKind = "memory"

    def __init__(self, *, max_entries: int, max_bytes: int, ttl_secs: float) -> None:
        self._map = BudgetedMap(max_entries=max_entries, max_bytes=max_bytes,
                                ttl_secs=ttl_secs, on_remove=self._forget)
        self.max_entries, self.max_bytes, self.ttl_secs = max_entries, max_bytes, ttl_secs
        # item id → the key holding it, and back
        self._owner: dict[str, str] = {}
        self._items_of: dict[str, tuple[str, ...]] = {}

    def _forget(self, key: Hashable) -> None:
        for item_id in self._items_of.pop(str(key), ()):
            if self._owner.get(item_id) == key:
                del self._owner[item_id]

    def put(self, key: str, values: Sequence[bytes], now: float | None, *, size: int,
            pinned: bool = False, ttl_secs: float | None = None,
            index: Sequence[str] = ()) -> bool:
        kept = self._map.put(key, list(values), _now(now), pinned=pinned, size=size,
                             ttl_secs=ttl_secs)
        if kept and index:
            self._items_of[key] = tuple(index)
            self._owner.update(dict.fromkeys(index, key))
        return kept

    def get(self, key: str, now: float | None) -> Values | None:
        values: Values | None = self._map.get(key, _now(now))
        return None if values is None else list(values)   # a copy: later edits never show

    def find(self, item_id: str, now: float | None) -> Values | None:
        owner = self._owner.get(item_id)
        return None if owner is None else self.get(owner, now)

    def append(self, key: str, items: Sequence[bytes], now: float | None, *, size: int,
               first: bytes | None = None, create: bool = True) -> bool | None:
        t = _now(now)
        if self._map.get(key, t) is not None:
            return self._map.append(key, items, t, size=size)
        if not create:
            return None
        if first is not None:
            items, size = [first, *items], size + len(first)
        return self._map.append(key, items, t, size=size)

    def set_first(self, key: str, value: bytes, now: float | None) -> bool:
        record: Values | None = self._map.get(key, _now(now))
        if not record:
            return False        # no entry, or an empty one: there is no first value
        growth = len(value) - len(record[0])
        record[0] = value
        return self._map.append(key, (), _now(now), size=growth)

    def remove_value(self, key: str, value: bytes, now: float | None) -> bool:
        record: Values | None = self._map.get(key, _now(now))
        if record is None:
            return False
        try:
            del record[record.index(value, 1)]
        except ValueError:
            return False
        return self._map.append(key, (), _now(now), size=-(len(value) + len(",")))

    def delete(self, key: str, now: float | None) -> bool:
        return self._map.delete(key, _now(now))

    def pin(self, key: str, now: float | None) -> bool:
        return self._map.pin(key, _now(now))

    def unpin(self, key: str, now: float | None) -> bool:
        return self._map.unpin(key, _now(now))

    def sweep(self, now: float | None) -> int:
        return self._map.sweep(_now(now))

    def next_expiry(self) -> float | None:
        return self._map.next_expiry()

    def statistics(self) -> BudgetStatistics:
        return self._map.statistics()

    def contains(self, key: str) -> bool:
        return key in self._map

    def ping(self) -> None:
        pass


def _now(now: float | None) -> float:
    if now is None:
        raise ValueError("MemoryEntries runs on the caller's clock: pass `now`")
    return now


# ---- Redis -----------------------------------------------------------------------------------

LUA = (Path(__file__).with_name("entries.lua")).read_text()
GRACE_SECS = 60.0          # Redis expiry fires this long after an entry's TTL (a backstop)
CHUNK = 1000               # values per RPUSH (Lua's unpack has a stack limit)
_STAT_FIELDS = ("bytes", "pinned_bytes", "ev_ttl", "ev_lru", "ev_bytes", "ev_oversize",
                "ev_deleted")


class RedisEntries:
    """The BudgetedMap policy in Redis; every operation is one atomic script call.

    Keys live under `{prefix}` (a Redis Cluster hash tag, so one store's keys share a slot).
    """

    blocking = True
    kind: StoreKind = "redis"

    def __init__(self, client: Any, prefix: str, *, max_entries: int, max_bytes: int,
                 ttl_secs: float) -> None:
        self._client = client
        self._script = client.register_script(LUA)
        self._prefix = "{" + prefix + "}"
        self.max_entries, self.max_bytes, self.ttl_secs = max_entries, max_bytes, ttl_secs

    def _call(self, op: str, now: float | None, *args: Any) -> Any:
        from redis.exceptions import ConnectionError, TimeoutError

        head = [op, -1 if now is None else repr(float(now)), self.max_entries, self.max_bytes,
                repr(float(self.ttl_secs)), int(GRACE_SECS * 1000)]
        try:
            return self._script(keys=[self._prefix], args=[*head, *args], client=self._client)
        except (ConnectionError, TimeoutError) as exc:
            raise StoreUnavailable(f"the store (Redis) is unreachable: {exc}") from None

    def put(self, key: str, values: Sequence[bytes], now: float | None, *, size: int,
            pinned: bool = False, ttl_secs: float | None = None,
            index: Sequence[str] = ()) -> bool:
        ttl = "" if ttl_secs is None else repr(float(ttl_secs))
        return bool(self._call("put", now, key, int(pinned), size, ttl, len(values), *values,
                               *index))

    def get(self, key: str, now: float | None) -> Values | None:
        return _values(self._call("get", now, key))

    def find(self, item_id: str, now: float | None) -> Values | None:
        return _values(self._call("find", now, item_id))

    def append(self, key: str, items: Sequence[bytes], now: float | None, *, size: int,
               first: bytes | None = None, create: bool = True) -> bool | None:
        mode = b"" if not create else b"+" if first is None else b"=" + first
        found = self._call("append", now, key, size, mode, *items)
        return None if found == -1 else bool(found)

    def set_first(self, key: str, value: bytes, now: float | None) -> bool:
        return bool(self._call("set_first", now, key, value))

    def remove_value(self, key: str, value: bytes, now: float | None) -> bool:
        return bool(self._call("remove_value", now, key, value))

    def delete(self, key: str, now: float | None) -> bool:
        return bool(self._call("delete", now, key))

    def pin(self, key: str, now: float | None) -> bool:
        return bool(self._call("pin", now, key))

    def unpin(self, key: str, now: float | None) -> bool:
        return bool(self._call("unpin", now, key))

    def sweep(self, now: float | None) -> int:
        return int(self._call("sweep", now))

    def next_expiry(self) -> float | None:
        found = self._call("next_expiry", None)
        return None if not found else float(found)

    def statistics(self) -> BudgetStatistics:
        entries, pinned_entries, *raw = self._call("statistics", None)
        stats = dict(zip(_STAT_FIELDS, (int(v) for v in raw)))
        return BudgetStatistics(
            entries=int(entries), bytes=stats["bytes"] + stats["pinned_bytes"],
            pinned_entries=int(pinned_entries), pinned_bytes=stats["pinned_bytes"],
            max_entries=self.max_entries, max_bytes=self.max_bytes, ttl_secs=self.ttl_secs,
            evictions=Evictions(ttl=stats["ev_ttl"], lru=stats["ev_lru"],
                                bytes=stats["ev_bytes"], oversize=stats["ev_oversize"],
                                deleted=stats["ev_deleted"]))

    def ping(self) -> None:
        from redis.exceptions import ConnectionError, TimeoutError

        try:
            self._client.ping()
        except (ConnectionError, TimeoutError) as exc:
            raise StoreUnavailable(f"the store (Redis) is unreachable: {exc}") from None

    def contains(self, key: str) -> bool:
        p = self._prefix
        return bool(self._client.sismember(p + ":pin", key)
                    or self._client.zscore(p + ":lru", key) is not None)

    def clear(self) -> int:
        """Deletes every key of this store (tests and `--store-reset`); returns how many."""
        keys = list(self._client.scan_iter(match=_glob_escape(self._prefix) + ":*", count=1000))
        return int(self._client.delete(*keys)) if keys else 0


def _values(found: Any) -> Values | None:
    if not found:
        return None
    return [bytes(v) for v in found[1]]


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
