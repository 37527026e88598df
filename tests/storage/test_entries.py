"""MemoryEntries, RedisEntries and SqliteEntries on the same random operations give identical
answers.

The Redis side runs the store policy as Lua scripts on a real Redis server, the SQLite side
as SQL transactions on a file; the memory side is BudgetedMap. Every answer, every read
value and the statistics after every step must be equal, at budgets chosen to sit on the
edges (0, 1, a few entries; byte budgets a few values wide; TTLs the clock steps cross
exactly).
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest

from triode.storage.memory import MemoryEntries
from triode.storage.redis import RedisEntries
from triode.storage.sqlite_entries import SqliteEntries

from .two_handles import check_one_store

KEYS = ["a", "b", "c", "d"]
ITEM_IDS = ["i1", "i2", "i3"]
values = st.lists(st.sampled_from([b"x" * 5, b"y" * 12, b"z" * 30, b"\x00\xff\"", b""]),
                  min_size=1, max_size=4)
key = st.sampled_from(KEYS)

operations = st.one_of(
    st.tuples(st.just("tick"), st.sampled_from([0, 0.5, 1, 2.5, 5, 10])),
    st.tuples(st.just("put"), key, values, st.booleans(),
              st.sampled_from([None, None, 0, 3, 5]),
              st.lists(st.sampled_from(ITEM_IDS), max_size=2, unique=True)),
    st.tuples(st.just("get"), key),
    st.tuples(st.just("find"), st.sampled_from(ITEM_IDS)),
    st.tuples(st.just("append"), key, st.lists(st.sampled_from([b"p" * 3, b"q" * 20]),
                                               max_size=3),
              st.sampled_from([None, b"", b"f" * 7]), st.booleans()),
    st.tuples(st.just("set_first"), key, st.sampled_from([b"o", b"O" * 25])),
    st.tuples(st.just("remove_value"), key, st.sampled_from([b"p" * 3, b"q" * 20, b"x" * 5])),
    st.tuples(st.just("delete"), key),
    st.tuples(st.just("pin"), key),
    st.tuples(st.just("unpin"), key),
    st.tuples(st.just("sweep")),
)

counter = itertools.count()


def apply(entries: Any, op: tuple[Any, ...], now: float) -> Any:
    match op:
        case ("put", k, vals, pinned, ttl, index):
            size = sum(len(v) for v in vals) + 2 + len(vals) - 1
            return entries.put(k, vals, now, size=size, pinned=pinned, ttl_secs=ttl,
                               index=index)
        case ("append", k, items, first, create):
            return entries.append(k, items, now, size=sum(len(i) for i in items), first=first,
                                  create=create)
        case ("sweep",):
            return entries.sweep(now)
        case ("set_first" | "remove_value" as name, k, value):
            return getattr(entries, name)(k, value, now)
        case (name, arg):
            return getattr(entries, name)(arg, now)
    raise AssertionError(op)


@pytest.fixture(params=["redis", "sqlite"])
def shared_entries(request):
    """Makes the shared backend's Entries under a fresh name (per hypothesis example)."""
    if request.param == "redis":
        client = request.getfixturevalue("redis_client")
        prefix = request.getfixturevalue("redis_prefix")
        return lambda **budgets: RedisEntries(client, f"{prefix}:{next(counter)}", **budgets)
    db = request.getfixturevalue("sqlite_db")
    return lambda **budgets: SqliteEntries(db, f"s{next(counter)}", **budgets)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(max_entries=st.sampled_from([3, 1, 0, 5]), max_bytes=st.sampled_from([120, 40, 0, 400]),
       ttl_secs=st.sampled_from([10, 5, 0]), ops=st.lists(operations, max_size=40))
def test_shared_entries_answer_as_memory_entries(shared_entries, max_entries, max_bytes,
                                                 ttl_secs, ops):
    """Redis and SQLite: the same answers, values, statistics and next expiry as memory."""
    budgets = dict(max_entries=max_entries, max_bytes=max_bytes, ttl_secs=ttl_secs)
    memory = MemoryEntries(**budgets)
    shared = shared_entries(**budgets)
    now = 1000.0
    for step, op in enumerate(ops):
        if op[0] == "tick":
            now += op[1]
            continue
        expected = apply(memory, op, now)
        got = apply(shared, op, now)
        assert got == expected, (step, op, ops[:step])
        assert shared.statistics() == memory.statistics(), (step, op)
        assert shared.next_expiry() == memory.next_expiry(), (step, op)
    for k in KEYS:
        assert shared.contains(k) == memory.contains(k)
        assert shared.get(k, now) == memory.get(k, now)
    shared.clear()


def test_server_clock_and_a_shared_store(redis_client, redis_prefix):
    """`now=None` runs on the Redis server's clock; two handles on one prefix (two processes)
    see one store: one's put is the other's get, and the budgets count both."""
    one = RedisEntries(redis_client, redis_prefix, max_entries=2, max_bytes=1000, ttl_secs=60)
    two = RedisEntries(redis_client, redis_prefix, max_entries=2, max_bytes=1000, ttl_secs=60)
    check_one_store(one, two)
    # The TTL is also Redis expiry on the value: a backstop for a store nobody sweeps.
    ttl_ms = redis_client.pttl("{" + redis_prefix + "}:v:b")
    assert 60_000 < ttl_ms <= 120_000
