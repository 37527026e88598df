"""Durable stores end to end: a server SIGKILLed under load and restarted on the same store
(SQLite and Redis) loses nothing a client saw finish, and the background jobs it cut off
read `failed` with the restart message; the SQLite store's faults (a bad path, a file that
is not a database, a locked database, a full disk) are a one-line startup error or a 503,
never a crash or a hang."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from triode.service.background import RESTARTED

from ..conftest import REDIS_URL, run_server, wait_until
from ..test_startup import fails_with, serve
from .test_spine import HOLD, MODEL, sse_events

TERMINAL = {"completed", "incomplete", "failed", "cancelled"}


@pytest.fixture(params=["sqlite", "redis"])
def durable_store(request, tmp_path) -> tuple[str, ...]:
    if request.param == "sqlite":
        return ("--store", f"sqlite:///{tmp_path / 'store.db'}")
    return ("--store", REDIS_URL, "--store-prefix", request.getfixturevalue("redis_prefix"))


def hold_job() -> dict[str, Any]:
    """A background job that generates 2,000+ characters (seconds on the bundled model)."""
    return {**{k: v for k, v in HOLD.items() if k != "stream"}, "background": True}


class Load:
    """Clients of one server, each recording what it saw finish: foreground 200 bodies,
    streams' terminal events, background jobs polled to their end."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.finished: dict[str, dict[str, Any]] = {}    # id → the final object seen
        self.jobs: set[str] = set()                      # background jobs created
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def _saw(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self.finished[obj["id"]] = obj

    def start(self) -> None:
        for target in (self._foreground, self._streams, self._streams, self._background):
            thread = threading.Thread(target=self._run, args=(target,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def join(self) -> None:
        for thread in self._threads:
            thread.join(30)

    def _run(self, target: Any) -> None:
        with httpx.Client(base_url=self.base_url, timeout=30) as http, \
                contextlib.suppress(httpx.HTTPError):
            target(http)

    def _foreground(self, http: httpx.Client) -> None:
        i = 0
        while not self.stop.is_set():
            r = http.post("/v1/responses", json={"model": MODEL, "input": f"Reply with: f{i}"})
            if r.status_code == 200:
                self._saw(r.json())
            i += 1

    def _streams(self, http: httpx.Client) -> None:
        i = 0
        while not self.stop.is_set():
            with http.stream("POST", "/v1/responses", json={
                    "model": MODEL, "input": f"Reply with: s{i} lake", "stream": True}) as r:
                text = "".join(r.iter_text())
            events = sse_events(text)
            if events and events[-1]["type"] in {"response.completed", "response.incomplete"}:
                self._saw(events[-1]["response"])
            i += 1

    def _background(self, http: httpx.Client) -> None:
        i = 0
        while not self.stop.is_set():
            # Two long jobs (still running at the kill), then short ones.
            body = hold_job() if i < 2 else {"model": MODEL, "background": True,
                                             "input": f"Reply with: b{i}"}
            r = http.post("/v1/responses", json=body)
            if r.status_code == 200:
                self.jobs.add(r.json()["id"])
            for rid in sorted(self.jobs - set(self.finished)):
                obj = http.get(f"/v1/responses/{rid}").json()
                if obj["status"] in TERMINAL:
                    self._saw(obj)
            i += 1
            time.sleep(0.05)


def test_sigkill_under_load_loses_nothing_a_client_saw_finish(durable_store):
    """A loaded server (foreground, streamed and background responses) is SIGKILLed and
    restarted on the same store: every response a client saw finish reads back exactly as
    seen, and every background job that had not finished reads `failed` with the restart
    message, at once (no waiting for a lease)."""
    flags = ("--parallel", "4", "--max-queue", "64", "--responses-background-max-jobs", "64")
    with run_server(*durable_store, *flags) as server:
        load = Load(server.base_url)
        load.start()
        wait_until(lambda: len(load.finished) >= 30
                   and any(j not in load.finished for j in load.jobs), timeout=120)
        server.proc.kill()                 # SIGKILL, mid-flight
        server.proc.wait()
        load.stop.set()
        load.join()
    seen = dict(load.finished)
    unfinished = load.jobs - set(seen)
    assert len(seen) >= 30 and unfinished
    with run_server(*durable_store, *flags) as server:
        lost = {rid: obj["status"] for rid, obj in seen.items()
                if server.http.get(f"/v1/responses/{rid}").json() != obj}
        assert lost == {}
        after = {rid: server.http.get(f"/v1/responses/{rid}").json() for rid in unfinished}
        for rid, obj in after.items():
            # A job may have ended unseen before the kill; none is left unfinished.
            assert obj["status"] in TERMINAL, (rid, obj["status"])
        restarted = [obj for obj in after.values() if obj["status"] == "failed"]
        assert restarted, after
        for obj in restarted:
            assert obj["error"] == {"code": "server_error", "message": RESTARTED}
            events = sse_events(server.http.get(f"/v1/responses/{obj['id']}",
                                                params={"stream": "true"}).text)
            assert events[-1]["type"] == "response.failed"
            assert events[-1]["response"]["status"] == "failed"


def test_memory_store_jobs_are_still_gone_after_a_restart():
    """The default store keeps the seed's rule: a restart forgets its jobs (404)."""
    with run_server() as srv:
        held = srv.http.post("/v1/responses", json=hold_job()).json()
        srv.proc.kill()
        srv.proc.wait()
    with run_server() as srv:
        assert srv.http.get(f"/v1/responses/{held['id']}").status_code == 404


# ---- faults --------------------------------------------------------------------------------


def test_unusable_database_paths_are_one_line_startup_errors(tmp_path):
    """A directory that does not exist, a directory, a file that is not a database: one line
    naming --store and the reason, a non-zero exit, before the model loads."""
    missing = tmp_path / "nowhere"
    text = tmp_path / "notes.db"
    text.write_text("these are notes, not a database\n" * 50)
    cases = {
        f"sqlite:///{missing}/s.db": f"the directory '{missing}' does not exist",
        f"sqlite:///{tmp_path}": f"'{tmp_path}' is a directory",
        f"sqlite:///{text}": f"'{text}' is not a SQLite database",
    }
    for url, reason in cases.items():
        started = time.monotonic()
        fails_with(serve("--port", "0", "--store", url), f"triode: --store {url}: {reason}")
        assert time.monotonic() - started < 20
    fails_with(serve("--store", "sqlite://x.db"),
               "triode: --store sqlite: use sqlite:///relative/path.db or "
               "sqlite:////absolute/path.db (got 'sqlite://x.db')")


def locked(path: Path) -> sqlite3.Connection:
    """Holds the database's write lock from this (another) process."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS other (x)")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO other VALUES (1)")
    return conn


def test_a_locked_database_at_startup_is_a_one_line_error(tmp_path):
    path = tmp_path / "store.db"
    holder = locked(path)
    try:
        url = f"sqlite:///{path}"
        fails_with(serve("--port", "0", "--store", url),
                   f"triode: --store {url}: the database '{path}' is locked by another "
                   "process (gave up after 2 s)")
    finally:
        holder.close()


def test_a_database_locked_mid_run_answers_503_then_recovers(tmp_path):
    """Another process holds the write lock: stored routes answer 503 store_unavailable with
    Retry-After within a few seconds (never hang), store: false still works; once the lock
    is gone, the same server serves again."""
    path = tmp_path / "store.db"
    with run_server("--store", f"sqlite:///{path}") as server:
        body = {"model": MODEL, "input": "Reply with: amber 77 kite"}
        kept = server.http.post("/v1/responses", json=body).json()
        holder = sqlite3.connect(str(path), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            for request in (lambda: server.http.get(f"/v1/responses/{kept['id']}"),
                            lambda: server.http.post("/v1/responses", json=body)):
                started = time.monotonic()
                r = request()
                assert time.monotonic() - started < 5
                assert r.status_code == 503, r.text
                assert r.json()["error"]["code"] == "store_unavailable"
                assert r.headers["retry-after"] == "1"
            r = server.http.post("/v1/responses", json={**body, "store": False})
            assert r.status_code == 200 and r.json()["status"] == "completed"
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        again = wait_until(lambda: (r := server.http.get(f"/v1/responses/{kept['id']}"))
                           .status_code == 200 and r.json(), timeout=10)
        assert again == kept
        assert server.http.post("/v1/responses", json=body).status_code == 200
        assert server.proc.poll() is None


@contextlib.contextmanager
def small_filesystem(where: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (skips where mounting is not permitted)."""
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a small filesystem here: " + done.stderr.decode().strip())
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path: Path) -> None:
    """Writes `path` until its filesystem has no room left."""
    with open(path, "wb") as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()


def test_a_full_disk_mid_run_is_503_and_recovers(tmp_path):
    """The disk under the database fills up while the server runs: stored creates answer 503
    store_unavailable before generating anything, the server keeps running and store: false
    works; with room again, the same server stores again and what it stored before is
    intact."""
    with small_filesystem(tmp_path / "small") as disk, \
            run_server("--store", f"sqlite:///{disk / 'store.db'}") as server:
        body = {"model": MODEL, "input": "Reply with: amber 77 kite"}
        kept = [server.http.post("/v1/responses", json=body).json() for _ in range(3)]
        filler = disk / "filler"
        fill(filler)
        r = server.http.post("/v1/responses", json={**body, "input": "x " * 20000})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "store_unavailable"
        r = server.http.post("/v1/responses", json={**body, "store": False})
        assert r.status_code == 200
        filler.unlink()
        created = wait_until(lambda: (r := server.http.post("/v1/responses", json=body))
                             .status_code == 200 and r.json(), timeout=10)
        for obj in [*kept, created]:
            assert server.http.get(f"/v1/responses/{obj['id']}").json() == obj
        assert server.proc.poll() is None
        assert "Traceback" not in "".join(server.log)


def test_hypercorn_workers_share_a_job_on_one_file(tmp_path):
    """Two `triode serve` processes on one SQLite file: a background job created on one is
    cancelled from the other (the owner polls for cancels), and both read it cancelled."""
    store = ("--store", f"sqlite:///{tmp_path / 'store.db'}")
    with run_server(*store) as a, run_server(*store) as b:
        job = a.http.post("/v1/responses", json=hold_job()).json()
        wait_until(lambda: b.http.get(f"/v1/responses/{job['id']}").json()["status"]
                   == "in_progress")
        started = time.monotonic()
        r = b.http.post(f"/v1/responses/{job['id']}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
        assert time.monotonic() - started < 3
        assert a.http.get(f"/v1/responses/{job['id']}").json() == r.json()


def test_the_file_holds_one_store_per_prefix(tmp_path):
    """--store-prefix on one file: two deployments that share nothing."""
    path = tmp_path / "store.db"
    with run_server("--store", f"sqlite:///{path}", "--store-prefix", "one") as one, \
            run_server("--store", f"sqlite:///{path}", "--store-prefix", "two") as two:
        made = one.http.post("/v1/responses", json={"model": MODEL,
                                                    "input": "Reply with: x"}).json()
        assert one.http.get(f"/v1/responses/{made['id']}").status_code == 200
        assert two.http.get(f"/v1/responses/{made['id']}").status_code == 404
    names = {row[0] for row in sqlite3.connect(str(path)).execute(
        "SELECT DISTINCT store FROM entries")}
    assert names == {"one:responses"}
