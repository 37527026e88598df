"""The contract under the stores: one `Backend` per `--store` URL scheme (memory, Redis,
SQLite), chosen once by `open_backend`, making the three things the actors keep state in:

- `Entries`, a budgeted map (TTL, LRU entry count, byte budget, pinned entries, an item
  index) of lists of byte strings: a stored response (its body, its events), a conversation
  (its object, then its items), a reasoning echo (its text). Every method takes `now`, the
  clock the policy runs on, or None on a shared store: the store's own clock;
- the job `Board` of a shared store (Redis or SQLite): background jobs' owners, processes'
  leases, jobs' events and cancel requests, so every process on the store sees each job;
- the tenants' limits `Counters`: counting windows and concurrency tickets.

Nothing here starts a task: the calls of a shared backend block (network or file I/O) and
the actors run them in worker threads (`trio.to_thread`, on the backend's `limiter`); the
memory ones return at once and run in the trio thread. tests/storage/ runs one suite over
all three.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import trio

from ..settings import sqlite_location
from .budget import BudgetStatistics
from .memory import MEMORY
from .redis import RedisBackend
from .sqlite import SqliteBackend
from .sqlite_database import Database
from .values import StoreKind, Values, Window


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


class CancelFeed(Protocol):
    def take(self) -> list[str]:
        """The ids whose cancel was asked for since the last call (blocking)."""
        ...

    def close(self) -> None: ...


class Board(Protocol):
    """The job board's state: blocking calls, run in worker threads on `limiter`."""

    cancel_wait_secs: float   # how long to sleep between CancelFeed.take calls (0: it waits)

    @property
    def limiter(self) -> trio.CapacityLimiter | None: ...

    def heartbeat(self, worker_id: str, token: str, lease_secs: float) -> None: ...

    def claim(self, response_id: str, worker_id: str) -> None: ...

    def owner(self, response_id: str) -> str | None: ...

    def worker(self, worker_id: str) -> str | None:
        """A worker's process token while its lease runs, else None."""
        ...

    def events(self, response_id: str, after: str) -> list[tuple[str, bytes]]: ...

    def add_events(self, response_id: str, events: Sequence[bytes]) -> None: ...

    def request_cancel(self, response_id: str) -> None: ...

    def release(self, response_id: str) -> bool:
        """Ends the job's ownership; True for the one caller that ended it."""
        ...

    def jobs(self) -> list[str]: ...

    def tidy(self, events_keep_secs: float) -> None: ...

    def cancels(self, worker_id: str) -> CancelFeed:
        """The cancels other processes ask of this worker's jobs."""
        ...


class Counters(Protocol):
    """The tenants' limits: counting windows (`hit`, `peek`, `charge`) and concurrency
    tickets with leases (`acquire`, `renew`, `release`)."""

    limiter: trio.CapacityLimiter | None   # None: run inline (memory)

    def hit(self, name: str, limit: int, now: float) -> Window: ...
    def peek(self, name: str, now: float) -> Window: ...
    def charge(self, name: str, amount: int, now: float) -> None: ...
    def acquire(self, name: str, ticket: str, limit: int, now: float) -> Window: ...
    def renew(self, tickets: list[tuple[str, str]], now: float) -> None: ...
    def release(self, name: str, ticket: str) -> None: ...


class Backend(Protocol):
    """Where the stores keep their entries, the jobs their board and the limits their
    counters: this process (the default), a shared Redis or a SQLite file."""

    @property
    def kind(self) -> StoreKind: ...

    def open(self) -> None:
        """Blocking: makes the backend ready (SQLite: opens or creates the file, else
        StoreOpenError; Redis: asks it to answer, else StoreUnavailable)."""
        ...

    def describe(self) -> str:
        """What the startup log says of it."""
        ...

    def entries(self, name: str, *, max_entries: int, max_bytes: int, ttl_secs: float
                ) -> Entries: ...

    def board(self) -> Board | None:
        """The job board of a shared store (background jobs seen by every process); None
        for this process's memory."""
        ...

    def counters(self) -> Counters: ...

    def limiter(self) -> trio.CapacityLimiter:
        """The worker threads a store's blocking operations run on."""
        ...

    def close(self) -> None:
        """Releases what the backend holds (at the end of the actor tree)."""
        ...


def open_backend(store: str, prefix: str) -> Backend:
    """The backend of a `--store` value: `memory`; `sqlite:///PATH` (not opened yet:
    `Backend.open`); or a Redis URL (redis://, rediss://, unix://); with the key prefix."""
    if store == "memory":
        return MEMORY
    location = sqlite_location(store)
    if location is not None:
        return SqliteBackend(Database(location.path, synchronous=location.synchronous),
                             prefix)
    return RedisBackend.connect(store, prefix)

