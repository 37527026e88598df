"""What the three store actors (store.py) share: the loop that serves a store's mailbox over
its `Entries` (storage/backend.py), the messages every store answers, and the handle's
common part.

A store in this process runs each message's operation in the trio thread, between messages,
and sweeps expired entries at the moment the next one expires (it waits on its mailbox with
that deadline), so memory comes back even if nobody reads them, and a store whose entries
never expire never wakes. A shared store (Redis, SQLite) runs each operation (one atomic
script call, or one SQLite transaction) in a worker thread, several at once (SQLite: one at
a time per process, see storage/sqlite_database.py), sweeps every second, and answers
StoreUnavailable while its backend cannot serve it.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable

import attrs
import outcome
import trio

from ..errors import StoreDisabled, StoreUnavailable
from ..storage.backend import Backend
from ..storage.budget import BudgetStatistics
from ..storage.memory import MEMORY
from ..storage.values import StoreKind
from ..tenants import DEFAULT_SCOPE, scoped
from .mailbox import ReplyChannel, answer, ask, reply_with

MAILBOX_SIZE = 64


# Messages shared by both mailboxes.


@attrs.frozen
class GetStatistics:
    reply: ReplyChannel[BudgetStatistics]


@attrs.frozen
class Ping:
    """Answers once the store's backend answers (a shared store: Redis is reachable)."""

    reply: ReplyChannel[None]


@attrs.frozen
class StoreHandle:
    _inbox: trio.MemorySendChannel[Any]
    _disabled_reason: str | None
    shared: bool = False          # kept in Redis or SQLite (reachable or not), not this process
    kind: StoreKind = "memory"
    # The tenant whose names this handle reads and writes (tenants.scoped): another
    # tenant's handle over the same store reaches other keys, so its ids miss.
    scope: str = DEFAULT_SCOPE

    def _key(self, name: str) -> str:
        return scoped(self.scope, name)

    async def ping(self) -> None:
        """Raises StoreUnavailable unless a shared store answers now (Redis is reachable, the
        SQLite file is not locked out): a stored create asks first, so that nothing is
        accepted that could not be kept."""
        if self.shared and self._disabled_reason is None:
            await ask(self._inbox, Ping)

    def check_enabled(self) -> None:
        """Raises StoreDisabled when the store was configured off."""
        if self._disabled_reason is not None:
            raise StoreDisabled(self._disabled_reason)

    async def statistics(self) -> BudgetStatistics:
        """Works on a disabled store too, so /health can report it."""
        return await ask(self._inbox, GetStatistics)



# How often a shared store drops expired entries (Redis frees their values by itself; this
# keeps the counts and the byte budget current when nothing else touches the store).
REDIS_SWEEP_SECS = 1.0

# (the reply channel or None, the operation computing the answer)
Operation = tuple["ReplyChannel[Any] | None", Callable[[], Any]]


class BudgetedStore:
    disabled_reason: str
    name: str

    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        ttl_secs: float,
        clock: Callable[[], float] = trio.current_time,
        backend: Backend = MEMORY,
    ) -> None:
        self._entries = backend.entries(self.name, max_entries=max_entries,
                                        max_bytes=max_bytes, ttl_secs=ttl_secs)
        self._backend = backend
        self._clock = clock

    def _now(self) -> float | None:
        """The policy's clock: this process's, or (shared store) the Redis server's."""
        return None if self._entries.blocking else self._clock()

    async def _serve(self, inbox: trio.MemoryReceiveChannel[Any],
                     operation: Callable[[Any], Operation]) -> None:
        if self._entries.blocking:
            await self._serve_concurrently(inbox, operation)
            return
        while True:
            try:
                msg = await self._next_message(inbox)
            except trio.EndOfChannel:
                return
            if msg is not None:
                reply, op = operation(msg)
                if reply is None:
                    op()
                else:
                    answer(reply, op)

    async def _next_message(self, inbox: trio.MemoryReceiveChannel[Any]) -> Any | None:
        """The next mailbox message; or None after sweeping, when the next entry expires
        first (so expired entries give their memory back even if nobody reads them)."""
        deadline = self._entries.next_expiry()
        with trio.move_on_at(math.inf if deadline is None else deadline):
            return await inbox.receive()
        self._entries.sweep(self._clock())
        return None

    async def _serve_concurrently(self, inbox: trio.MemoryReceiveChannel[Any],
                                  operation: Callable[[Any], Operation]) -> None:
        """A shared store: each message's operation is one atomic script call (or SQLite
        transaction), run in a worker thread; messages overlap (Redis or SQLite's write lock
        orders them), replies go back as they come."""
        limiter = self._backend.limiter()

        async def in_thread(op: Callable[[], Any]) -> Any:
            return await trio.to_thread.run_sync(op, limiter=limiter)

        async def run(reply: ReplyChannel[Any] | None, op: Callable[[], Any]) -> None:
            result = await outcome.acapture(in_thread, op)
            if reply is not None:
                reply_with(reply, result)

        async def sweep() -> None:
            while True:
                await trio.sleep(REDIS_SWEEP_SECS)
                with contextlib.suppress(StoreUnavailable):
                    await trio.to_thread.run_sync(self._entries.sweep, None, limiter=limiter)

        async with trio.open_nursery() as nursery:
            if self._entries.ttl_secs > 0:
                nursery.start_soon(sweep)
            async for msg in inbox:
                nursery.start_soon(run, *operation(msg))
            nursery.cancel_scope.cancel()

    @property
    def _disabled(self) -> str | None:
        return self.disabled_reason if self._entries.max_entries == 0 else None

