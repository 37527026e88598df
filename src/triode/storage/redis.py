"""The Redis backend (`--store redis://...`, rediss://, unix://; Valkey speaks the same):
the stores' entries, the job board and the limits' counters under one key prefix, through
redis-py's sync client (its pool holds a connection per worker thread in use).

`RedisEntries` holds the exact policy of `BudgetedMap` (TTL, LRU entry count, byte budget,
pinned entries, eviction counts by cause, the item index) as one Lua script
(lua/entries.lua): tests/storage/test_entries.py runs it and `SqliteEntries` against
`MemoryEntries` on the same random operations and expects identical answers. Each operation
is one script call, atomic in Redis, so any number of processes may share one store. Every
method takes `now`, the clock the policy runs on, or None: the Redis server's own clock,
which is what keeps several processes on one store consistent. TTL is also set as Redis
expiry on the values (plus a grace period), so Redis frees an expired value even when no
triode process is left to sweep it.

The board: a job's owner `{P}:job:<id>` (and the set `{P}:jobs`), each process's lease
`{P}:worker:<id>`, a job's events as the Stream `{P}:events:<id>`, cancels published on
`{P}:cancel`. The counters: `{P}:limits:<name>`, a counter with PEXPIRE for a window, a
sorted set scored by lease expiry for tickets (lua/window_*.lua, lua/tickets_acquire.lua).

Every call blocks (network I/O): the actors run them in worker threads. An unreachable or
slow Redis is StoreUnavailable (a 503 with Retry-After).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import attrs
import trio

from ..errors import StoreUnavailable
from .budget import BudgetStatistics, Evictions
from .values import (EVENTS_KEEP_SECS, TICKET_LEASE_SECS, WINDOW_SECS, StoreKind, Values,
                     Window)

T = TypeVar("T")

# Redis calls give up after this long (then StoreUnavailable: a 503 with Retry-After).
REDIS_TIMEOUT_SECS = 2.0
# A Redis store's operations run in worker threads, this many at once per store.
REDIS_THREADS = 8
# How long a wait for a published cancel lasts before the board's loop looks again.
LISTEN_POLL_SECS = 0.5


def _script(name: str) -> str:
    return (Path(__file__).parent / "lua" / f"{name}.lua").read_text()


def guarded(fn: Callable[..., T], *args: Any) -> T:
    """Calls redis-py; an unreachable or slow Redis is StoreUnavailable."""
    from redis.exceptions import ConnectionError, TimeoutError

    try:
        return fn(*args)
    except (ConnectionError, TimeoutError) as exc:
        raise StoreUnavailable(f"the store (Redis) is unreachable: {exc}") from None


@attrs.frozen
class RedisBackend:
    """Every store under `prefix` on one Redis."""

    client: Any
    prefix: str = "triode"
    kind: StoreKind = "redis"

    @classmethod
    def connect(cls, url: str, prefix: str) -> "RedisBackend":
        """A client for the URL (no connection is made yet)."""
        import redis

        client = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT_SECS,
                                      socket_connect_timeout=REDIS_TIMEOUT_SECS,
                                      health_check_interval=30, retry_on_timeout=False)
        return cls(client, prefix)

    def open(self) -> None:
        """Raises StoreUnavailable unless Redis answers (blocking: call from a thread)."""
        self.entries("ping", max_entries=0, max_bytes=0, ttl_secs=0).ping()

    def describe(self) -> str:
        return f"prefix {self.prefix!r}"

    def entries(self, name: str, *, max_entries: int, max_bytes: int, ttl_secs: float
                ) -> "RedisEntries":
        return RedisEntries(self.client, f"{self.prefix}:{name}", max_entries=max_entries,
                            max_bytes=max_bytes, ttl_secs=ttl_secs)

    def board(self) -> "RedisBoard":
        return RedisBoard(self.client, self.prefix)

    def counters(self) -> "RedisCounters":
        return RedisCounters(self.client, self.prefix)

    def limiter(self) -> trio.CapacityLimiter:
        return trio.CapacityLimiter(REDIS_THREADS)

    def close(self) -> None:
        """The client's pool closes with the process."""


# ---- the entries -------------------------------------------------------------------------------

LUA = _script("entries")
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
        head = [op, -1 if now is None else repr(float(now)), self.max_entries, self.max_bytes,
                repr(float(self.ttl_secs)), int(GRACE_SECS * 1000)]
        return guarded(lambda: self._script(keys=[self._prefix], args=[*head, *args],
                                            client=self._client))

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
        guarded(self._client.ping)

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


# ---- the job board ------------------------------------------------------------------------------


class RedisBoard:
    """The job board's blocking operations (actors/jobs.py) under `{prefix}`."""

    cancel_wait_secs = 0.0    # the pub/sub read waits by itself
    limiter = None

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def key(self, kind: str, name: str = "") -> str:
        return f"{{{self.prefix}}}:{kind}" + (f":{name}" if name else "")

    def heartbeat(self, worker_id: str, token: str, lease_secs: float) -> None:
        guarded(self.client.set, self.key("worker", worker_id), token, None,
                int(lease_secs * 1000))

    def claim(self, response_id: str, worker_id: str) -> None:
        pipe = self.client.pipeline()
        pipe.set(self.key("job", response_id), worker_id)
        pipe.sadd(self.key("jobs"), response_id)
        guarded(pipe.execute)

    def owner(self, response_id: str) -> str | None:
        found = guarded(self.client.get, self.key("job", response_id))
        return None if found is None else bytes(found).decode()

    def worker(self, worker_id: str) -> str | None:
        found = guarded(self.client.get, self.key("worker", worker_id))
        return None if found is None else bytes(found).decode()

    def events(self, response_id: str, after: str) -> list[tuple[str, bytes]]:
        start = after if after == "-" else "(" + after
        found = guarded(self.client.xrange, self.key("events", response_id), start)
        return [(bytes(sid).decode(), bytes(fields[b"e"])) for sid, fields in found]

    def add_events(self, response_id: str, events: Sequence[bytes]) -> None:
        stream = self.key("events", response_id)
        pipe = self.client.pipeline()
        for event in events:
            pipe.xadd(stream, {"e": event})
        pipe.expire(stream, int(EVENTS_KEEP_SECS))
        guarded(pipe.execute)

    def request_cancel(self, response_id: str) -> None:
        guarded(self.client.publish, self.key("cancel"), response_id)

    def release(self, response_id: str) -> bool:
        pipe = self.client.pipeline()
        pipe.delete(self.key("job", response_id))
        pipe.srem(self.key("jobs"), response_id)
        deleted, _ = guarded(pipe.execute)
        return bool(deleted)

    def jobs(self) -> list[str]:
        return [bytes(raw).decode() for raw in guarded(self.client.smembers, self.key("jobs"))]

    def tidy(self, events_keep_secs: float) -> None:
        """Redis expires events and leases by itself."""

    def cancels(self, worker_id: str) -> "RedisCancels":
        return RedisCancels(self)


class RedisCancels:
    """The cancels published on `{prefix}:cancel` (every process hears every one)."""

    def __init__(self, board: RedisBoard) -> None:
        self._pubsub = board.client.pubsub(ignore_subscribe_messages=True)
        self._channel = board.key("cancel")
        self._subscribed = False

    def take(self) -> list[str]:
        if not self._subscribed:
            guarded(self._pubsub.subscribe, self._channel)
            self._subscribed = True
        msg = guarded(self._pubsub.get_message, True, LISTEN_POLL_SECS)
        if msg is not None and msg.get("type") == "message":
            return [bytes(msg["data"]).decode()]
        return []

    def close(self) -> None:
        self._pubsub.close()


# ---- the limits' counters -----------------------------------------------------------------------


class RedisCounters:
    """Keys `{prefix}:limits:<name>`; times in milliseconds (PTTL), tickets scored by their
    lease's expiry in wall-clock seconds (the same on every worker)."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.limiter: trio.CapacityLimiter | None = trio.CapacityLimiter(REDIS_THREADS)
        self._scripts = {name: client.register_script(_script(name)) for name in
                         ("window_hit", "window_peek", "window_charge", "tickets_acquire")}

    def _key(self, name: str) -> str:
        return f"{self.prefix}:limits:{name}"

    def _window(self, answer: list[Any]) -> Window:
        admitted, count, ttl = (int(v) for v in answer)
        return Window(bool(admitted), count, WINDOW_SECS if ttl < 0 else ttl / 1000)

    def _run(self, script: str, name: str, *args: Any) -> Any:
        return guarded(self._scripts[script], [self._key(name)], list(args))

    def hit(self, name: str, limit: int, now: float) -> Window:
        return self._window(self._run("window_hit", name, limit, int(WINDOW_SECS * 1000)))

    def peek(self, name: str, now: float) -> Window:
        return self._window(self._run("window_peek", name))

    def charge(self, name: str, amount: int, now: float) -> None:
        self._run("window_charge", name, amount, int(WINDOW_SECS * 1000))

    def acquire(self, name: str, ticket: str, limit: int, now: float) -> Window:
        return self._window(self._run("tickets_acquire", name, limit, ticket, now,
                                      now + TICKET_LEASE_SECS, int(TICKET_LEASE_SECS * 2000)))

    def renew(self, tickets: list[tuple[str, str]], now: float) -> None:
        pipe = self.client.pipeline()
        for name, ticket in tickets:
            pipe.zadd(self._key(name), {ticket: now + TICKET_LEASE_SECS}, xx=True)
        guarded(pipe.execute)

    def release(self, name: str, ticket: str) -> None:
        guarded(self.client.zrem, self._key(name), ticket)
