"""The backend of one process (`--store memory`, the default): the stores' entries are
BudgetedMaps (budget.py), the limits' counters dicts; there is no job board (background jobs
are this process's alone). Nothing here blocks: the actors call it in the trio thread.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import trio

from .budget import BudgetedMap, BudgetStatistics
from .values import TICKET_LEASE_SECS, WINDOW_SECS, StoreKind, Values, Window


class MemoryBackend:
    """Makes this process's entries and counters; holds nothing itself, so one instance
    serves every actor tree."""

    kind: StoreKind = "memory"

    def open(self) -> None:
        """Nothing to open."""

    def describe(self) -> str:
        return "this process"

    def entries(self, name: str, *, max_entries: int, max_bytes: int, ttl_secs: float
                ) -> "MemoryEntries":
        return MemoryEntries(max_entries=max_entries, max_bytes=max_bytes, ttl_secs=ttl_secs)

    def board(self) -> None:
        """No job board: background jobs are this process's alone."""
        return None

    def counters(self) -> "MemoryCounters":
        return MemoryCounters()

    def limiter(self) -> trio.CapacityLimiter:
        """Never used (nothing blocks); the contract's answer."""
        return trio.CapacityLimiter(1)

    def close(self) -> None:
        """Nothing to release."""


MEMORY = MemoryBackend()


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




class MemoryCounters:
    """The limits' counters in dicts; every operation completes without an await, in the
    trio thread, so no two interleave."""

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
            held[ticket] = now + TICKET_LEASE_SECS
        self._tickets[name] = held
        return Window(admitted, len(held), 0.0)

    def renew(self, tickets: list[tuple[str, str]], now: float) -> None:
        for name, ticket in tickets:
            if ticket in self._tickets.get(name, {}):
                self._tickets[name][ticket] = now + TICKET_LEASE_SECS

    def release(self, name: str, ticket: str) -> None:
        self._tickets.get(name, {}).pop(ticket, None)
