"""The SQLite store's own behaviour: one file shared by several connections (processes), the
machine's clock, durability of a committed operation, and its faults: each is a clear
SqliteOpenError at open, or StoreUnavailable (a 503) at run time, never a hang."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from triode.actors.store import ResponseStore
from triode.storage.records import StoredResponse, encode_json
from triode.storage.sqlite import SqliteBackend, SqliteBoard
from triode.storage.sqlite_database import BUSY_BACKOFF_SECS, Database, SqliteOpenError
from triode.storage.sqlite_entries import SqliteEntries
from triode.errors import SettingsError, StoreUnavailable
from triode.settings import SqliteLocation, sqlite_location

from .two_handles import check_one_store


def opened(path: Path, **kw) -> Database:
    db = Database(str(path), **kw)
    db.open()
    return db


def test_the_url_follows_sqlalchemy():
    """sqlite:///relative and sqlite:////absolute, with ?synchronous=; anything else is a
    one-line error naming --store."""
    assert sqlite_location("sqlite:///triode.db") == SqliteLocation("triode.db")
    assert sqlite_location("sqlite:////var/lib/t.db") == SqliteLocation("/var/lib/t.db")
    assert sqlite_location("sqlite:///a/b.db?synchronous=FULL") == SqliteLocation("a/b.db",
                                                                                   "full")
    assert sqlite_location("memory") is None
    for bad in ("sqlite://", "sqlite:///", "sqlite://host/x.db", "sqlite:x.db",
                "sqlite:///x.db?journal=off", "sqlite:///x.db?synchronous=off"):
        with pytest.raises(SettingsError, match="--store"):
            sqlite_location(bad)


def test_two_connections_share_one_store_on_the_wall_clock(tmp_path):
    """`now=None` is the machine's wall clock; two connections on one file (two processes)
    see one store: one's put is the other's get, and the budgets count both."""
    a, b = opened(tmp_path / "s.db"), opened(tmp_path / "s.db")
    one = SqliteEntries(a, "r", max_entries=2, max_bytes=1000, ttl_secs=60)
    two = SqliteEntries(b, "r", max_entries=2, max_bytes=1000, ttl_secs=60)
    before = time.time()
    check_one_store(one, two)
    expiry = two.next_expiry()
    assert expiry is not None and before + 60 <= expiry <= time.time() + 60
    a.close()
    b.close()


def test_committed_operations_survive_a_killed_process(tmp_path):
    """A process that put an entry and was then SIGKILLed (no close, no checkpoint) leaves
    it readable: what returned was committed to the WAL."""
    path = tmp_path / "s.db"
    script = (
        "import os, signal, sys\n"
        "from triode.storage.sqlite_database import Database\n"
        "from triode.storage.sqlite_entries import SqliteEntries\n"
        f"db = Database({str(path)!r}); db.open()\n"
        "e = SqliteEntries(db, 'r', max_entries=10, max_bytes=10000, ttl_secs=0)\n"
        "for i in range(50): e.put(f'k{i}', [b'v%d' % i], None, size=5)\n"
        "print('put', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.stdout == "put\n" and done.returncode == -9, done.stderr
    assert (tmp_path / "s.db-wal").exists()          # nothing was checkpointed
    db = opened(path)
    entries = SqliteEntries(db, "r", max_entries=10, max_bytes=10000, ttl_secs=0)
    assert [entries.get(f"k{i}", None) for i in range(40, 50)] == [[b"v%d" % i]
                                                                   for i in range(40, 50)]
    assert entries.statistics().entries == 10 and entries.statistics().evictions.lru == 40


def test_open_failures_are_one_clear_reason(tmp_path):
    """No such directory, a directory, a file that is not a database, an unwritable place:
    SqliteOpenError saying which."""
    cases = {
        str(tmp_path / "missing" / "s.db"): "does not exist",
        str(tmp_path): "is a directory",
        "/proc/triode-test.db": "cannot",
    }
    (tmp_path / "text.db").write_text("not a database, just text " * 100)
    cases[str(tmp_path / "text.db")] = "is not a SQLite database"
    for path, reason in cases.items():
        with pytest.raises(SqliteOpenError, match=reason):
            Database(path).open()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_directory_is_a_clear_reason(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(SqliteOpenError, match="not writable"):
            Database(str(ro / "s.db")).open()
    finally:
        ro.chmod(0o700)


def hold_write_lock(path: Path) -> sqlite3.Connection:
    """Another connection holding the write lock (an open write transaction)."""
    other = sqlite3.connect(str(path), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO meta VALUES ('held', '1')")
    return other


def test_a_locked_database_gives_up_after_the_busy_timeout(tmp_path):
    """Opening a database another process holds locked fails within the busy timeout; at
    run time an operation answers StoreUnavailable, the next ones at once for the back-off,
    and the store works again once the lock is gone."""
    path = tmp_path / "s.db"
    opened(path).close()
    other = hold_write_lock(path)
    started = time.monotonic()
    with pytest.raises(SqliteOpenError, match="locked by another process"):
        Database(str(path), busy_timeout=0.3).open()
    assert time.monotonic() - started < 2
    other.execute("ROLLBACK")

    db = opened(path, busy_timeout=0.3)
    entries = SqliteEntries(db, "r", max_entries=10, max_bytes=1000, ttl_secs=0)
    assert entries.put("a", [b"1"], None, size=3)
    other.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="locked"):
        entries.get("a", None)
    assert 0.25 < time.monotonic() - started < 1
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="locked"):
        entries.get("a", None)                  # at once: the back-off
    assert time.monotonic() - started < 0.1
    with pytest.raises(StoreUnavailable):
        db.ping()
    other.execute("ROLLBACK")
    time.sleep(BUSY_BACKOFF_SECS)
    assert entries.get("a", None) == [b"1"]
    db.ping()
    other.close()


def test_a_full_disk_is_store_unavailable_and_changes_nothing(tmp_path):
    """'database or disk is full' mid-operation is StoreUnavailable; the transaction rolls
    back whole (the budgets' counts stay exact) and the store goes on once there is room."""
    db = opened(tmp_path / "s.db")
    entries = SqliteEntries(db, "r", max_entries=100, max_bytes=10**9, ttl_secs=0)
    assert entries.put("small", [b"x" * 10], None, size=12)
    before = entries.statistics()
    conn = db._conn
    assert conn is not None
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")   # the file may not grow: a full disk
    with pytest.raises(StoreUnavailable, match="full"):
        entries.put("big", [b"y" * 200_000], None, size=200_002)
    assert entries.statistics() == before
    assert entries.get("small", None) == [b"x" * 10]
    assert entries.get("big", None) is None
    conn.execute("PRAGMA max_page_count = 1073741823")
    assert entries.put("big", [b"y" * 200_000], None, size=200_002)


async def test_the_store_actor_answers_503_while_the_disk_is_full(tmp_path):
    """Through the response store's handle: a put on a full disk raises StoreUnavailable
    (the HTTP layer's 503 with Retry-After), reads still answer."""
    db = opened(tmp_path / "s.db")
    async with trio.open_nursery() as nursery:
        responses = await nursery.start(ResponseStore(
            max_entries=10, max_bytes=10**9, ttl_secs=60,
            backend=SqliteBackend(db, "t")).run)
        assert await responses.put("resp_1", StoredResponse(encode_json({"id": "resp_1"})))
        conn = db._conn
        assert conn is not None
        conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
        with pytest.raises(StoreUnavailable) as caught:
            await responses.put("resp_2", StoredResponse(
                encode_json({"id": "resp_2", "text": "z" * 100_000})))
        assert caught.value.status == 503 and caught.value.headers() == {"Retry-After": "1"}
        assert json.loads((await responses.get("resp_1")).body) == {"id": "resp_1"}
        nursery.cancel_scope.cancel()


def test_the_board_polls_cancels_only_for_their_owner(tmp_path):
    """A cancel asked on one connection is taken once, by the owner's poll only."""
    a, b = opened(tmp_path / "s.db"), opened(tmp_path / "s.db")
    board_a, board_b = SqliteBoard(a, "p"), SqliteBoard(b, "p")
    board_a.claim("resp_1", "worker-a")
    assert board_b.owner("resp_1") == "worker-a"
    board_b.request_cancel("resp_1")
    assert board_b.take_cancels("worker-b") == []
    assert board_a.take_cancels("worker-a") == ["resp_1"]
    assert board_a.take_cancels("worker-a") == []
    board_a.add_events("resp_1", [b'{"n":1}', b'{"n":2}'])
    first = board_b.events("resp_1", "-")
    assert [e for _, e in first] == [b'{"n":1}', b'{"n":2}']
    assert board_b.events("resp_1", first[0][0]) == first[1:]
    assert board_b.release("resp_1") and not board_a.release("resp_1")
    assert board_a.jobs() == []



def test_a_lock_met_while_switching_to_wal_is_retried(tmp_path, monkeypatch):
    """Workers starting together on a new file can meet in the switch to WAL mode, where
    SQLite answers 'database is locked' at once instead of waiting: open retries it within
    the busy timeout (seen as 14% of concurrent opens failing before)."""
    import triode.storage.sqlite_database as module

    real_connect = sqlite3.connect
    refusals = iter([True, True, False])

    class MetAnotherOpener:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self._conn = conn

        def execute(self, sql: str, *args):
            if sql.startswith("PRAGMA journal_mode") and next(refusals, False):
                raise sqlite3.OperationalError("database is locked")
            return self._conn.execute(sql, *args)

        def __getattr__(self, name: str):
            return getattr(self._conn, name)

    monkeypatch.setattr(module.sqlite3, "connect",
                        lambda *a, **kw: MetAnotherOpener(real_connect(*a, **kw)))
    db = Database(str(tmp_path / "s.db"))
    db.open()
    assert next(refusals, "done") == "done"
    SqliteEntries(db, "r", max_entries=1, max_bytes=100, ttl_secs=0).put("a", [b"1"], None,
                                                                           size=3)
