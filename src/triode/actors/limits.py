"""Per-tenant limits: requests per minute, concurrent responses, output tokens per minute.

One `TenantLimits` task per process owns the counters' backend: this process's memory, or
the shared store (Redis, a SQLite file), where every worker on it counts against the same
figures, and renews the leases of this process's concurrency tickets. Its handle answers
with what a caller may do, and raises `TenantLimited` (429 `rate_limit_exceeded`,
`Retry-After`, OpenAI's `x-ratelimit-*` headers) otherwise. The memory counters need no
mailbox, like the access log's figures: they change only in the trio thread, each operation
without an await inside it, so no two interleave; a shared backend's operation is one atomic
script or transaction in a worker thread.

The algorithms (docs/security.md says the same):

- a *window* (requests, output tokens) opens with the first thing it counts and lasts
  WINDOW_SECS; it admits while its count is below the limit (the limit-th request is
  admitted, the one after is refused until the window closes, `Retry-After` seconds later).
  Output tokens are charged when a response ends, so a request is admitted while the window
  has budget left and its own tokens may take the window past the limit;
- *concurrency* is a set of tickets, one per response in flight (streamed, waited for, or a
  background job), each with a lease this process renews every LEASE_SECS / 3 while the
  response runs; a ticket whose process died lapses after LEASE_SECS. A response is admitted
  while the set holds fewer tickets than the limit.

Memory: dicts. Redis: one Lua script per operation (atomic): a counter with PEXPIRE for a
window, a sorted set scored by lease expiry for tickets. SQLite: the same in one IMMEDIATE
transaction per operation (tables limit_windows, limit_tickets).
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import time
import uuid
from typing import Any, Callable, Protocol, TypeVar

import attrs
import trio

from ..errors import RateLimited, StoreUnavailable
from ..tenants import Limits, Tenant
from .sqlite import Database

WINDOW_SECS = 60.0
LEASE_SECS = 30.0
THREADS = 8

T = TypeVar("T")


@attrs.frozen
class Window:
    """A window's state after an operation: whether it admitted, its count, seconds until
    it closes."""

    admitted: bool
    count: int
    reset_in: float


class Backend(Protocol):
    limiter: trio.CapacityLimiter | None   # None: run inline (memory)

    def hit(self, name: str, limit: int, now: float) -> Window: ...
    def peek(self, name: str, now: float) -> Window: ...
    def charge(self, name: str, amount: int, now: float) -> None: ...
    def acquire(self, name: str, ticket: str, limit: int, now: float) -> Window: ...
    def renew(self, tickets: list[tuple[str, str]], now: float) -> None: ...
    def release(self, name: str, ticket: str) -> None: ...


class MemoryBackend:
    limiter: trio.CapacityLimiter | None = None

    def __init__(self) -> None:
        self._windows: dict[str, tuple[int, float]] = {}      # name → (count, closes at)
        self._tickets: dict[str, dict[str, float]] = {}       # name → ticket → expires

    def _window(self, name: str, now: float) -> tuple[int, float]:
        count, closes = self._windows.get(name, (0, 0.0))
        return (count, closes) if closes > now else (0, now + WINDOW_SECS)

    def hit(self, name: str, limit: int, now: float) -> Window:
        count, closes = self._window(name, now)
        admitted = count < limit
        if admitted:
            count += 1
            self._windows[name] = (count, closes)
        return Window(admitted, count, closes - now)

    def peek(self, name: str, now: float) -> Window:
        count, closes = self._window(name, now)
        return Window(True, count, closes - now)

    def charge(self, name: str, amount: int, now: float) -> None:
        count, closes = self._window(name, now)
        self._windows[name] = (count + amount, closes)

    def acquire(self, name: str, ticket: str, limit: int, now: float) -> Window:
        held = {t: e for t, e in self._tickets.get(name, {}).items() if e > now}
        admitted = len(held) < limit
        if admitted:
            held[ticket] = now + LEASE_SECS
        self._tickets[name] = held
        return Window(admitted, len(held), 0.0)

    def renew(self, tickets: list[tuple[str, str]], now: float) -> None:
        for name, ticket in tickets:
            if ticket in self._tickets.get(name, {}):
                self._tickets[name][ticket] = now + LEASE_SECS

    def release(self, name: str, ticket: str) -> None:
        self._tickets.get(name, {}).pop(ticket, None)


HIT = """
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
if c < tonumber(ARGV[1]) then
  c = redis.call('INCR', KEYS[1])
  if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]); ttl = tonumber(ARGV[2]) end
  return {1, c, ttl}
end
return {0, c, ttl}
"""
PEEK = """
return {1, tonumber(redis.call('GET', KEYS[1]) or '0'), redis.call('PTTL', KEYS[1])}
"""
CHARGE = """
redis.call('INCRBY', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""
ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
local n = redis.call('ZCARD', KEYS[1])
if n < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return {1, n + 1, 0}
end
return {0, n, 0}
"""


class RedisBackend:
    """Keys `{prefix}:limits:<name>`; times in milliseconds (PTTL), tickets scored by their
    lease's expiry in wall-clock seconds (the same on every worker)."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.limiter: trio.CapacityLimiter | None = trio.CapacityLimiter(THREADS)
        self._scripts = {name: client.register_script(src) for name, src in
                         (("hit", HIT), ("peek", PEEK), ("charge", CHARGE),
                          ("acquire", ACQUIRE))}

    def _key(self, name: str) -> str:
        return f"{self.prefix}:limits:{name}"

    def _window(self, answer: list[Any]) -> Window:
        admitted, count, ttl = (int(v) for v in answer)
        return Window(bool(admitted), count, WINDOW_SECS if ttl < 0 else ttl / 1000)

    def _run(self, script: str, name: str, *args: Any) -> Any:
        from .jobs import _guarded
        return _guarded(self._scripts[script], [self._key(name)], list(args))

    def hit(self, name: str, limit: int, now: float) -> Window:
        return self._window(self._run("hit", name, limit, int(WINDOW_SECS * 1000)))

    def peek(self, name: str, now: float) -> Window:
        return self._window(self._run("peek", name))

    def charge(self, name: str, amount: int, now: float) -> None:
        self._run("charge", name, amount, int(WINDOW_SECS * 1000))

    def acquire(self, name: str, ticket: str, limit: int, now: float) -> Window:
        return self._window(self._run("acquire", name, limit, ticket, now, now + LEASE_SECS,
                                      int(LEASE_SECS * 2000)))

    def renew(self, tickets: list[tuple[str, str]], now: float) -> None:
        from .jobs import _guarded
        pipe = self.client.pipeline()
        for name, ticket in tickets:
            pipe.zadd(self._key(name), {ticket: now + LEASE_SECS}, xx=True)
        _guarded(pipe.execute)

    def release(self, name: str, ticket: str) -> None:
        from .jobs import _guarded
        _guarded(self.client.zrem, self._key(name), ticket)


class SqliteBackend:
    """Rows of limit_windows and limit_tickets under the store prefix."""

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
                      (self._prefix, name, ticket, now + LEASE_SECS))
            return Window(True, held + 1, 0.0)
        return self._db.write(op, now)

    def renew(self, tickets: list[tuple[str, str]], now: float) -> None:
        def op(c: sqlite3.Connection, now: float) -> None:
            c.executemany("UPDATE limit_tickets SET expires = ? WHERE prefix = ? AND "
                          "name = ? AND ticket = ?",
                          [(now + LEASE_SECS, self._prefix, n, t) for n, t in tickets])
        self._db.write(op, now)

    def release(self, name: str, ticket: str) -> None:
        self._db.write(lambda c, now: c.execute(
            "DELETE FROM limit_tickets WHERE prefix = ? AND name = ? AND ticket = ?",
            (self._prefix, name, ticket)), None)


def duration(secs: float) -> str:
    """OpenAI's x-ratelimit-reset-* format: `1s`, `6m0s`, `20ms`."""
    if secs < 1:
        return f"{max(0, math.ceil(secs * 1000))}ms"
    whole = math.ceil(secs)
    minutes, seconds = divmod(whole, 60)
    return f"{minutes}m{seconds}s" if minutes else f"{seconds}s"


class TenantLimited(RateLimited):
    """A tenant's limit reached: 429 with Retry-After and the x-ratelimit-* headers."""

    def __init__(self, message: str, *, kind: str, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.type = kind      # OpenAI's: "requests" or "tokens"
        self._headers = headers

    def headers(self) -> dict[str, str]:
        return dict(self._headers)


def _headers(kind: str, limit: int, window: Window) -> dict[str, str]:
    return {f"x-ratelimit-limit-{kind}": str(limit),
            f"x-ratelimit-remaining-{kind}": str(max(0, limit - window.count)),
            f"x-ratelimit-reset-{kind}": duration(window.reset_in)}


@attrs.frozen
class Ticket:
    """One response in flight for a tenant (its concurrency ticket, if the tenant has a
    concurrency limit) and what its end is charged to."""

    tenant: Tenant
    ticket: str | None


class TenantLimitsHandle:
    def __init__(self, backend: Backend, clock: Callable[[], float] = time.time) -> None:
        self._backend = backend
        self._clock = clock
        self._held: set[tuple[str, str]] = set()     # this process's tickets, renewed

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        limiter = self._backend.limiter
        if limiter is None:
            return fn(*args)
        return await trio.to_thread.run_sync(fn, *args, limiter=limiter)

    async def request(self, tenant: Tenant) -> dict[str, str]:
        """Counts one request against the tenant's requests per minute: the x-ratelimit
        headers to answer with; TenantLimited when the window is full."""
        limit = tenant.limits.requests_per_minute
        if limit is None:
            return {}
        window = await self._call(self._backend.hit, f"{tenant.name}:requests", limit,
                                  self._clock())
        headers = _headers("requests", limit, window)
        if not window.admitted:
            raise TenantLimited(
                f"Rate limit reached for tenant '{tenant.label}': {limit} requests per "
                f"minute (requests_per_minute). Try again in {duration(window.reset_in)}.",
                kind="requests",
                headers={**headers, "Retry-After": str(max(1, math.ceil(window.reset_in)))})
        return headers

    async def begin(self, tenant: Tenant) -> Ticket:
        """A response about to start: refused while the tenant's output tokens window has no
        budget left, or it has its concurrent_requests in flight."""
        limits: Limits = tenant.limits
        if limits.output_tokens_per_minute is not None:
            limit = limits.output_tokens_per_minute
            window = await self._call(self._backend.peek, f"{tenant.name}:tokens",
                                      self._clock())
            if window.count >= limit:
                raise TenantLimited(
                    f"Rate limit reached for tenant '{tenant.label}': {limit} output tokens "
                    f"per minute (output_tokens_per_minute), {window.count} used. Try again "
                    f"in {duration(window.reset_in)}.", kind="tokens",
                    headers={**_headers("tokens", limit, window),
                             "Retry-After": str(max(1, math.ceil(window.reset_in)))})
        if limits.concurrent_requests is None:
            return Ticket(tenant, None)
        ticket = uuid.uuid4().hex
        name = f"{tenant.name}:concurrent"
        window = await self._call(self._backend.acquire, name, ticket,
                                  limits.concurrent_requests, self._clock())
        if not window.admitted:
            raise TenantLimited(
                f"Rate limit reached for tenant '{tenant.label}': "
                f"{limits.concurrent_requests} responses in flight (concurrent_requests). "
                "Try again when one finishes.", kind="requests",
                headers={"Retry-After": "1"})
        self._held.add((name, ticket))
        return Ticket(tenant, ticket)

    async def end(self, ticket: Ticket, output_tokens: int) -> None:
        """The response ended: its ticket is returned, its output tokens charged."""
        tenant = ticket.tenant
        if ticket.ticket is not None:
            name = f"{tenant.name}:concurrent"
            self._held.discard((name, ticket.ticket))
            await self._call(self._backend.release, name, ticket.ticket)
        if tenant.limits.output_tokens_per_minute is not None and output_tokens:
            await self._call(self._backend.charge, f"{tenant.name}:tokens", output_tokens,
                             self._clock())

    async def renew(self) -> None:
        if self._held:
            await self._call(self._backend.renew, sorted(self._held), self._clock())


class TenantLimits:
    """The actor: owns the backend through its handle and renews this process's tickets'
    leases every LEASE_SECS / 3."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def run(self, *, task_status: trio.TaskStatus[TenantLimitsHandle]
                  = trio.TASK_STATUS_IGNORED) -> None:
        handle = TenantLimitsHandle(self._backend)
        task_status.started(handle)
        while True:
            await trio.sleep(LEASE_SECS / 3)
            with contextlib.suppress(StoreUnavailable):   # the next renewal tries again
                await handle.renew()
