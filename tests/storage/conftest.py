"""`budgeted`: the store policy's deterministic tests run on BudgetedMap, on RedisEntries and
on SqliteEntries; `sqlite_db`: a fresh SQLite store database."""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Iterator

import pytest

from triode.storage.budget import BudgetedMap, BudgetStatistics, approx_json_bytes
from triode.storage.backend import Entries
from triode.storage.redis import RedisEntries
from triode.storage.sqlite_database import Database
from triode.storage.sqlite_entries import SqliteEntries

from ..conftest import REDIS_URL


class JsonEntriesMap:
    """BudgetedMap's interface over RedisEntries or SqliteEntries, values as JSON: a put's
    value is one element, an append's items are one element each."""

    def __init__(self, entries: Entries) -> None:
        self.entries = entries

    def put(self, key: str, value: Any, now: float, *, pinned: bool = False,
            size: int | None = None, ttl_secs: float | None = None) -> bool:
        size = approx_json_bytes(value) if size is None else size
        return self.entries.put(key, [b"v" + json.dumps(value).encode()], now, size=size,
                                pinned=pinned, ttl_secs=ttl_secs)

    def get(self, key: str, now: float) -> Any | None:
        values = self.entries.get(key, now)
        if values is None:
            return None
        if len(values) == 1 and values[0][:1] == b"v":
            return json.loads(values[0][1:])
        return [json.loads(v[1:]) for v in values]

    def append(self, key: str, items: Iterable[Any], now: float, *, size: int | None = None
               ) -> bool:
        items = list(items)
        size = sum(approx_json_bytes(i) for i in items) if size is None else size
        return self.entries.append(key, [b"i" + json.dumps(i).encode() for i in items], now,
                                   size=size)

    def delete(self, key: str, now: float) -> bool:
        return self.entries.delete(key, now)

    def pin(self, key: str, now: float) -> bool:
        return self.entries.pin(key, now)

    def unpin(self, key: str, now: float) -> bool:
        return self.entries.unpin(key, now)

    def sweep(self, now: float) -> int:
        return self.entries.sweep(now)

    def statistics(self) -> BudgetStatistics:
        return self.entries.statistics()

    def __contains__(self, key: str) -> bool:
        return self.entries.contains(key)

    def __len__(self) -> int:
        return self.entries.statistics().entries


@pytest.fixture
def redis_client() -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def sqlite_db(tmp_path: Any) -> Iterator[Database]:
    """An opened database in a fresh file, closed at the end."""
    db = Database(str(tmp_path / "store.db"))
    db.open()
    yield db
    db.close()


@pytest.fixture(params=["memory", "redis", "sqlite"])
def budgeted(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Makes a BudgetedMap, or the same policy in Redis under a fresh prefix, or in a fresh
    SQLite file."""
    if request.param == "memory":
        return BudgetedMap
    made = iter(range(1_000))
    if request.param == "sqlite":
        db = request.getfixturevalue("sqlite_db")

        def make_sqlite(**budgets: Any) -> JsonEntriesMap:
            return JsonEntriesMap(SqliteEntries(db, f"s{next(made)}", **budgets))
        return make_sqlite
    client = request.getfixturevalue("redis_client")
    prefix = request.getfixturevalue("redis_prefix")

    def make(**budgets: Any) -> JsonEntriesMap:
        return JsonEntriesMap(RedisEntries(client, f"{prefix}:{next(made)}", **budgets))
    return make
