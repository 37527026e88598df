"""open_backend: the one place a `--store` value becomes a backend, which then makes the
entries, the job board and the limits' counters of its technology."""

from __future__ import annotations

import pytest

from triode.errors import StoreUnavailable
from triode.storage.backend import open_backend
from triode.storage.memory import MEMORY, MemoryCounters, MemoryEntries
from triode.storage.redis import RedisBoard, RedisCounters, RedisEntries
from triode.storage.sqlite import SqliteBoard, SqliteCounters
from triode.storage.sqlite_entries import SqliteEntries
from triode.storage.values import StoreOpenError

from ..conftest import REDIS_URL

BUDGETS = {"max_entries": 2, "max_bytes": 100, "ttl_secs": 0.0}


def test_memory_is_this_process_with_no_board():
    """`memory`: one shared in-process backend; background jobs have no board."""
    backend = open_backend("memory", "p")
    backend.open()
    assert backend is MEMORY and backend.kind == "memory"
    assert isinstance(backend.entries("r", **BUDGETS), MemoryEntries)
    assert isinstance(backend.counters(), MemoryCounters)
    assert backend.board() is None


def test_a_sqlite_url_opens_its_file_and_makes_its_parts(tmp_path):
    """`sqlite:///PATH`: open creates the file; entries, board and counters live in it."""
    path = tmp_path / "s.db"
    backend = open_backend(f"sqlite:///{path}", "p")
    backend.open()
    try:
        assert backend.kind == "sqlite" and path.exists()
        assert backend.describe() == f"{path}, synchronous=normal, prefix 'p'"
        entries = backend.entries("r", **BUDGETS)
        assert isinstance(entries, SqliteEntries) and entries.put("a", [b"1"], None, size=3)
        assert isinstance(backend.board(), SqliteBoard)
        assert isinstance(backend.counters(), SqliteCounters)
    finally:
        backend.close()


def test_a_sqlite_file_that_cannot_be_opened_says_why(tmp_path):
    """A SQLite file that cannot be opened is StoreOpenError with the reason (a startup error)."""
    with pytest.raises(StoreOpenError, match="does not exist"):
        open_backend(f"sqlite:///{tmp_path}/missing/s.db", "p").open()


def test_a_redis_url_makes_redis_parts(redis_prefix):
    """A Redis URL: open pings it; entries, board and counters live under the prefix."""
    backend = open_backend(REDIS_URL, redis_prefix)
    backend.open()
    assert backend.kind == "redis" and backend.describe() == f"prefix {redis_prefix!r}"
    assert isinstance(backend.entries("r", **BUDGETS), RedisEntries)
    assert isinstance(backend.board(), RedisBoard)
    assert isinstance(backend.counters(), RedisCounters)


def test_an_unreachable_redis_is_store_unavailable_when_opened():
    """An unreachable Redis is StoreUnavailable at open (startup warns and goes on)."""
    with pytest.raises(StoreUnavailable):
        open_backend("redis://127.0.0.1:1/0", "p").open()
