"""A key → entry map that enforces an entry count, a TTL and a byte budget at once.

Pure bookkeeping, no trio: the caller passes the current time into every call, so the
policy is testable with plain numbers. The store actors own one each.

Policy, as the store flags describe it:

* **TTL** counts from insert. A replace or an `unpin` is a new insert; a read or an append
  is not. An entry whose age is `>= ttl_secs` is expired and never returned. `ttl_secs == 0`
  disables expiry. A put (or unpin) may give one entry its own TTL instead of the map's
  (finished `background` + `store: false` responses live for the ephemeral TTL).
* **Entry count** is an LRU limit: a read or an append makes an entry most recent.
* **Bytes** are the approximate compact-JSON size of the retained values
  (`approx_json_bytes`). An entry larger than the whole budget is not kept ("oversize").
  `max_bytes == 0` keeps the route alive but evicts every entry at once.
* Eviction drops expired entries first, then least recently used ones until both the count
  and the bytes fit.
* **Pinned** entries (active background jobs) are outside TTL and LRU and never evicted.
  They are admitted only while the pinned total stays within `max_bytes`, and admitting one
  never evicts an ordinary entry, so pinned and ordinary entries each keep within the byte
  budget on their own; `statistics()` reports both together and the pinned part apart.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any, Callable, Hashable, Iterable

import attrs

_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def approx_json_bytes(obj: Any) -> int:
    """Estimates `len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())`.

    Walks the object instead of serializing it:

    * `None`/`true` → 4, `false` → 5; `int` → `len(str(n))`; `float` → `len(repr(x))`
    * `str` → 2 quotes + UTF-8 length + 1 per character JSON escapes (`"`, `\\`, controls;
      the rare `\\u00XX` controls really take 5 extra, counted as 1)
    * list/tuple of n → 2 brackets + n-1 commas + the items
    * dict of n → 2 braces + n-1 commas + n colons + keys (as strings) + values
    * anything else → sized as the string `str(obj)`

    Exact for ordinary JSON apart from those control escapes and non-finite floats.
    """
    if obj is None or obj is True:
        return 4
    if obj is False:
        return 5
    if isinstance(obj, str):
        return _string_bytes(obj)
    if isinstance(obj, int):
        return len(str(obj))
    if isinstance(obj, float):
        return len(repr(obj))
    if isinstance(obj, dict):
        if not obj:
            return 2
        size = 1 + 2 * len(obj)  # braces, colons and commas
        for key, value in obj.items():
            size += _string_bytes(key if isinstance(key, str) else str(key))
            size += approx_json_bytes(value)
        return size
    if isinstance(obj, (list, tuple)):
        if not obj:
            return 2
        return 1 + len(obj) + sum(approx_json_bytes(item) for item in obj)
    return _string_bytes(str(obj))


def _string_bytes(text: str) -> int:
    encoded = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return 2 + encoded + len(_NEEDS_ESCAPE.findall(text))


@attrs.frozen
class Evictions:
    """How many entries left the map, by cause."""

    ttl: int = 0
    lru: int = 0
    bytes: int = 0
    oversize: int = 0
    deleted: int = 0


@attrs.frozen
class BudgetStatistics:
    entries: int
    bytes: int
    pinned_entries: int
    pinned_bytes: int
    max_entries: int
    max_bytes: int
    ttl_secs: float
    evictions: Evictions


@attrs.define
class _Entry:
    value: Any
    size: int
    inserted_at: float
    ttl: float = 0.0


class BudgetedMap:
    def __init__(self, *, max_entries: int, max_bytes: int, ttl_secs: float,
                 on_remove: Callable[[Hashable], None] | None = None) -> None:
        """`on_remove(key)` is told of every entry that leaves, for whatever reason (evicted,
        expired, deleted, replaced), so an owner can keep an index of the entries in step."""
        self.max_entries = max_entries
        self._on_remove = on_remove
        self.max_bytes = max_bytes
        self.ttl_secs = ttl_secs
        # Ordinary entries twice: by recency for LRU, and by insert time for TTL, one queue
        # per distinct TTL. Within a queue the TTL is the same for all and time never goes
        # back, so insert order is expiry order and dropping expired entries only ever looks
        # at the queues' fronts.
        self._by_recency: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._by_insertion: dict[float, OrderedDict[Hashable, None]] = {}
        self._pinned: dict[Hashable, _Entry] = {}
        self._bytes = 0
        self._pinned_bytes = 0
        self._evictions = dict.fromkeys(attrs.fields_dict(Evictions), 0)

    def __len__(self) -> int:
        return len(self._by_recency) + len(self._pinned)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._pinned or key in self._by_recency

    def put(
        self,
        key: Hashable,
        value: Any,
        now: float,
        *,
        pinned: bool = False,
        size: int | None = None,
        ttl_secs: float | None = None,
    ) -> bool:
        """Inserts or replaces `key`; returns whether the entry is retained.

        `size` defaults to `approx_json_bytes(value)`; `ttl_secs` to the map's TTL. A
        replaced entry is simply gone, also when its replacement is not retained.
        """
        if size is None:
            size = approx_json_bytes(value)
        ttl = self.ttl_secs if ttl_secs is None else ttl_secs
        self._discard(key)
        if pinned:
            if self._pinned_bytes + size > self.max_bytes:
                return False
            self._pinned[key] = _Entry(value, size, now, ttl)
            self._pinned_bytes += size
            return True
        return self._admit(key, _Entry(value, size, now, ttl), now)

    def get(self, key: Hashable, now: float) -> Any | None:
        """Returns the live value for `key` (making it most recent), or None."""
        entry = self._live_entry(key, now)
        if entry is None:
            return None
        if key in self._by_recency:
            self._by_recency.move_to_end(key)
        return entry.value

    def append(
        self, key: Hashable, items: Iterable[Any], now: float, *, size: int | None = None
    ) -> bool:
        """Extends the list stored at `key`, creating it if absent; returns whether retained.

        `size` is the items' own size (default: `approx_json_bytes` of each); the entry
        grows by that plus its new commas. The append makes the entry most recent but keeps
        its age. An ordinary entry that outgrows the budget is dropped as oversize; a pinned
        one that would push the pinned total over the budget is left unchanged.
        """
        items = list(items)
        if size is None:
            size = sum(approx_json_bytes(item) for item in items)
        entry = self._live_entry(key, now)
        if entry is None:
            return self.put(key, items, now, size=len("[]") + _commas_added(0, items) + size)
        growth = size + _commas_added(len(entry.value), items)
        if key in self._pinned:
            if self._pinned_bytes + growth > self.max_bytes:
                return False
            self._pinned_bytes += growth
        elif entry.size + growth > self.max_bytes:
            self._remove_ordinary(key)
            self._evictions["oversize"] += 1
            return False
        else:
            self._bytes += growth
            self._by_recency.move_to_end(key)
        entry.value.extend(items)
        entry.size += growth
        self._evict_to_fit(now)
        return True

    def delete(self, key: Hashable, now: float) -> bool:
        """Removes a live entry; returns whether there was one."""
        if self._live_entry(key, now) is None:
            return False
        self._discard(key)
        self._evictions["deleted"] += 1
        return True

    def pin(self, key: Hashable, now: float) -> bool:
        """Takes a live entry out of TTL and LRU; False if absent or the pinned total would
        exceed the byte budget."""
        entry = self._live_entry(key, now)
        if entry is None:
            return False
        if key in self._pinned:
            return True
        if self._pinned_bytes + entry.size > self.max_bytes:
            return False
        self._remove_ordinary(key)
        self._pinned[key] = entry
        self._pinned_bytes += entry.size
        return True

    def unpin(self, key: Hashable, now: float) -> bool:
        """Makes a pinned entry ordinary, as if inserted now; returns whether it is retained
        (False if absent, or too big for the budget)."""
        if key not in self._pinned:
            return self._live_entry(key, now) is not None
        entry = self._pinned.pop(key)
        self._pinned_bytes -= entry.size
        entry.inserted_at = now
        return self._admit(key, entry, now)

    def sweep(self, now: float) -> int:
        """Drops every expired entry; returns how many."""
        return self._drop_expired(now)

    def next_expiry(self) -> float | None:
        """When the next ordinary entry expires (None if none can): a sweep then frees it."""
        fronts = [self._by_recency[next(iter(queue))] for ttl, queue in
                  self._by_insertion.items() if ttl > 0]
        return min((e.inserted_at + e.ttl for e in fronts), default=None)

    def statistics(self) -> BudgetStatistics:
        return BudgetStatistics(
            entries=len(self),
            bytes=self._bytes + self._pinned_bytes,
            pinned_entries=len(self._pinned),
            pinned_bytes=self._pinned_bytes,
            max_entries=self.max_entries,
            max_bytes=self.max_bytes,
            ttl_secs=self.ttl_secs,
            evictions=Evictions(**self._evictions),
        )

    def _admit(self, key: Hashable, entry: _Entry, now: float) -> bool:
        """Adds an ordinary entry as the newest, then evicts until the budgets hold."""
        if self.max_bytes == 0 or entry.size > self.max_bytes:
            self._evictions["bytes" if self.max_bytes == 0 else "oversize"] += 1
            return False
        self._by_recency[key] = entry
        self._by_insertion.setdefault(entry.ttl, OrderedDict())[key] = None
        self._bytes += entry.size
        self._evict_to_fit(now)
        return key in self._by_recency  # with max_entries == 0 it is evicted at once

    def _evict_to_fit(self, now: float) -> None:
        self._drop_expired(now)
        while len(self._by_recency) > self.max_entries:
            self._evict_least_recently_used("lru")
        while self._bytes > self.max_bytes:
            self._evict_least_recently_used("bytes")

    def _live_entry(self, key: Hashable, now: float) -> _Entry | None:
        if key in self._pinned:
            return self._pinned[key]
        entry = self._by_recency.get(key)
        if entry is not None and self._expired(entry, now):
            self._remove_ordinary(key)
            self._evictions["ttl"] += 1
            return None
        return entry

    @staticmethod
    def _expired(entry: _Entry, now: float) -> bool:
        return entry.ttl > 0 and now >= entry.inserted_at + entry.ttl

    def _drop_expired(self, now: float) -> int:
        dropped = 0
        for queue in list(self._by_insertion.values()):
            while queue:
                oldest = next(iter(queue))
                if not self._expired(self._by_recency[oldest], now):
                    break
                self._remove_ordinary(oldest)
                self._evictions["ttl"] += 1
                dropped += 1
        return dropped

    def _evict_least_recently_used(self, cause: str) -> None:
        self._remove_ordinary(next(iter(self._by_recency)))
        self._evictions[cause] += 1

    def _remove_ordinary(self, key: Hashable) -> None:
        entry = self._by_recency.pop(key)
        queue = self._by_insertion[entry.ttl]
        del queue[key]
        if not queue:
            del self._by_insertion[entry.ttl]
        self._bytes -= entry.size
        if self._on_remove is not None:
            self._on_remove(key)

    def _discard(self, key: Hashable) -> None:
        if key in self._pinned:
            self._pinned_bytes -= self._pinned.pop(key).size
            if self._on_remove is not None:
                self._on_remove(key)
        elif key in self._by_recency:
            self._remove_ordinary(key)


def _commas_added(existing: int, items: list[Any]) -> int:
    """Commas a JSON list of `existing` items gains when `items` are appended."""
    if not items:
        return 0
    return len(items) if existing else len(items) - 1
