"""Per-tenant limits: requests per minute, concurrent responses, output tokens per minute.

One `TenantLimits` task per process owns the backend's counters (storage/: this process's
memory, or the shared store, Redis or a SQLite file), where every worker on it counts against the same
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
  background job), each with a lease this process renews every TICKET_LEASE_SECS / 3 while
  the response runs; a ticket whose process died lapses after TICKET_LEASE_SECS. A response
  is admitted while the set holds fewer tickets than the limit.

The counters (storage/memory.py, redis.py, sqlite.py): memory: dicts. Redis: one Lua script
per operation (atomic): a counter with PEXPIRE for a window, a sorted set scored by lease
expiry for tickets. SQLite: the same in one IMMEDIATE transaction per operation (tables
limit_windows, limit_tickets).
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from typing import Any, Callable, TypeVar

import attrs
import trio

from ..errors import RateLimited, StoreUnavailable
from ..storage.backend import Counters
from ..storage.values import TICKET_LEASE_SECS, Window
from ..tenants import Limits, Tenant

T = TypeVar("T")


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
    def __init__(self, backend: Counters, clock: Callable[[], float] = time.time) -> None:
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
    leases every TICKET_LEASE_SECS / 3."""

    def __init__(self, backend: Counters) -> None:
        self._backend = backend

    async def run(self, *, task_status: trio.TaskStatus[TenantLimitsHandle]
                  = trio.TASK_STATUS_IGNORED) -> None:
        handle = TenantLimitsHandle(self._backend)
        task_status.started(handle)
        while True:
            await trio.sleep(TICKET_LEASE_SECS / 3)
            with contextlib.suppress(StoreUnavailable):   # the next renewal tries again
                await handle.renew()
