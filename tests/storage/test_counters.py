"""The limits' counters at their edges on every backend: memory, Redis and SQLite answer
the same."""

from __future__ import annotations

from typing import Iterator

import pytest

from triode.storage.backend import Counters
from triode.storage.memory import MemoryCounters
from triode.storage.redis import RedisCounters
from triode.storage.sqlite import SqliteCounters
from triode.storage.sqlite_database import Database
from triode.storage.values import TICKET_LEASE_SECS, WINDOW_SECS


@pytest.fixture(params=["memory", "redis", "sqlite"])
def backend(request, tmp_path) -> Iterator[Counters]:
    if request.param == "memory":
        yield MemoryCounters()
    elif request.param == "redis":
        import uuid

        import redis

        from ..conftest import REDIS_URL
        client = redis.Redis.from_url(REDIS_URL)
        prefix = f"triode-test-{uuid.uuid4().hex[:12]}"
        yield RedisCounters(client, prefix)
        keys = list(client.scan_iter(match=f"*{prefix}*"))
        if keys:
            client.delete(*keys)
        client.close()
    else:
        db = Database(str(tmp_path / "l.db"))
        db.open()
        yield SqliteCounters(db, "p")
        db.close()


NOW = 1_000_000.0


def test_a_window_admits_exactly_its_limit(backend):
    """Limit 3: three hits are admitted (counts 1, 2, 3), the fourth is not and does not
    count; the window closes WINDOW_SECS after its first hit."""
    got = [backend.hit("t:requests", 3, NOW + i) for i in range(4)]
    assert [(w.admitted, w.count) for w in got] == [(True, 1), (True, 2), (True, 3),
                                                    (False, 3)]
    assert 0 < got[-1].reset_in <= WINDOW_SECS
    assert backend.hit("other", 1, NOW).admitted        # another name has its own window


def test_a_zero_limit_admits_nothing(backend):
    assert [backend.hit("z", 0, NOW).admitted for _ in range(2)] == [False, False]
    assert backend.peek("z", NOW).count == 0


def test_charges_add_up_in_one_window(backend):
    assert backend.peek("t:tokens", NOW).count == 0
    backend.charge("t:tokens", 4, NOW)
    backend.charge("t:tokens", 1, NOW + 1)
    assert backend.peek("t:tokens", NOW + 2).count == 5


def test_tickets_admit_their_limit_and_come_back(backend):
    """Limit 2: two tickets, a third refused; a released one makes room; a ticket whose
    lease was not renewed lapses after TICKET_LEASE_SECS."""
    assert [backend.acquire("t:c", t, 2, NOW).admitted for t in "abc"] == [True, True, False]
    backend.release("t:c", "a")
    assert backend.acquire("t:c", "d", 2, NOW).admitted
    backend.renew([("t:c", "b")], NOW + TICKET_LEASE_SECS - 1)
    later = NOW + TICKET_LEASE_SECS + 0.5                   # d lapsed, b was renewed
    assert backend.acquire("t:c", "e", 2, later).admitted
    assert not backend.acquire("t:c", "f", 2, later).admitted


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_window_opens_again_after_it_closes(kind, tmp_path):
    """(Redis keeps time itself: its window's end is its key's expiry.)"""
    if kind == "memory":
        b: Counters = MemoryCounters()
    else:
        db = Database(str(tmp_path / "l.db"))
        db.open()
        b = SqliteCounters(db, "p")
    assert backend_hits(b, NOW) == [True, False]
    assert backend_hits(b, NOW + WINDOW_SECS - 0.001) == [False, False]
    assert backend_hits(b, NOW + WINDOW_SECS) == [True, False]


def backend_hits(b: Counters, now: float) -> list[bool]:
    return [b.hit("w", 1, now).admitted for _ in range(2)]
