"""Shared stores: several triode processes on one Redis (`--store redis://`) or one SQLite
file (`--store sqlite:///`) serve any id, end to end.

Two real `triode serve` processes (and plain hypercorn with two workers) on the test Redis,
each test under its own key prefix, or on a fresh SQLite file; the openai SDK talks to
both. The tests of a Redis that goes away are Redis's alone (SQLite's faults:
test_sqlite_store.py).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Iterator

import httpx
import openai
import pytest

from ..conftest import REDIS_URL, Server, run_server, stop, wait_until
from .test_spine import HOLD, MODEL, sse_events

RECALL = "Repeat your first answer."


@pytest.fixture(params=["redis", "sqlite"])
def store(request, tmp_path) -> tuple[str, ...]:
    """The --store flags of a fresh shared store: a Redis prefix, or a SQLite file."""
    if request.param == "sqlite":
        return ("--store", f"sqlite:///{tmp_path / 'store.db'}")
    return ("--store", REDIS_URL, "--store-prefix", request.getfixturevalue("redis_prefix"))


@contextlib.contextmanager
def pair(store: tuple[str, ...], *flags: str) -> Iterator[tuple[Server, Server]]:
    with run_server(*store, *flags) as a, run_server(*store, *flags) as b:
        yield a, b


@pytest.fixture
def servers(store):
    with pair(store) as both:
        yield both


def test_a_chain_alternating_between_two_processes(servers):
    """20 chained turns, each on the other process: every previous_response_id resolves,
    every GET and input_items call on either process returns what create returned."""
    a, b = (s.client() for s in servers)
    first = a.responses.create(model=MODEL, input="Reply with: amber 77 kite")
    assert first.output_text == "amber 77 kite"
    previous, made = first, [first]
    for turn in range(19):
        client = (b, a)[turn % 2]
        previous = client.responses.create(model=MODEL, input="Reply with: blue 5 fern"
                                           if turn % 3 else RECALL,
                                           previous_response_id=previous.id)
        assert previous.status == "completed"
        made.append(previous)
    assert made[1].output_text == "amber 77 kite"      # turn 2 recalled turn 1, across
    failures = 0
    for i, created in enumerate(made):
        for client in (a, b):
            got = client.responses.retrieve(created.id)
            failures += got.model_dump() != created.model_dump()
            items = client.responses.input_items.list(created.id)
            failures += [i.type for i in items.data] != ["message"]
    assert failures == 0


def test_delete_on_one_is_gone_on_the_other(servers):
    a, b = (s.client() for s in servers)
    created = a.responses.create(model=MODEL, input="Reply with: gone")
    b.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(created.id)
    with pytest.raises(openai.BadRequestError) as caught:
        a.responses.create(model=MODEL, input="x", previous_response_id=created.id)
    assert caught.value.body["code"] == "previous_response_not_found"


def test_conversations_are_shared(servers):
    """The Conversations API and `conversation=` turns on either process see one transcript."""
    a, b = (s.client() for s in servers)
    conv = a.conversations.create(metadata={"k": "v"})
    assert b.conversations.retrieve(conv.id).metadata == {"k": "v"}
    r1 = b.responses.create(model=MODEL, input="Reply with: silver 411 lake",
                            conversation=conv.id)
    r2 = a.responses.create(model=MODEL, input=RECALL, conversation=conv.id)
    assert (r1.output_text, r2.output_text) == ("silver 411 lake", "silver 411 lake")
    texts = [i.content[0].text for i in a.conversations.items.list(conv.id, order="asc").data]
    assert texts == ["Reply with: silver 411 lake", "silver 411 lake", RECALL,
                     "silver 411 lake"]
    b.conversations.update(conv.id, metadata={"k": "w"})
    assert a.conversations.retrieve(conv.id).metadata == {"k": "w"}
    b.conversations.delete(conv.id)
    with pytest.raises(openai.NotFoundError):
        a.conversations.retrieve(conv.id)


def test_budgets_hold_across_processes(store):
    """--responses-store-max-entries 3 on both: after 5 stores, alternating, exactly the 3
    most recent are readable from either process."""
    with pair(store, "--responses-store-max-entries", "3") as (sa, sb):
        a, b = sa.client(), sb.client()
        made = [(a, b)[i % 2].responses.create(model=MODEL, input=f"Reply with: w{i}")
                for i in range(5)]
        for i, created in enumerate(made):
            for client in (a, b):
                if i < 2:
                    with pytest.raises(openai.NotFoundError):
                        client.responses.retrieve(created.id)
                else:
                    assert client.responses.retrieve(created.id).id == created.id
        stats = sa.health()["stores"]["responses"]
        assert stats["entries"] == 3


def test_unreachable_redis_is_a_503_with_retry_after(redis_prefix):
    """Nothing listens at the store's address: the stored routes answer 503
    store_unavailable with Retry-After; a store: false response still works."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]         # closed again: nothing listens there
    with run_server("--store", f"redis://127.0.0.1:{port}/0") as server:
        r = server.http.post("/v1/responses", json={"model": MODEL, "input": "Reply with: x"})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "store_unavailable"
        assert r.headers["retry-after"] == "1"
        r = server.http.get("/v1/responses/resp_missing")
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        health = server.http.get("/health")
        assert health.status_code == 503
        assert health.json()["store"] == {"kind": "redis", "reachable": False}
        assert health.json()["status"] == "degraded" and health.json()["engine_alive"]
        r = server.http.post("/v1/responses", json={"model": MODEL, "input": "Reply with: y",
                                                    "store": False})
        assert r.status_code == 200 and r.json()["status"] == "completed", r.text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_hypercorn_with_two_workers(store):
    """Plain hypercorn, two worker processes, one port: 20 GETs, 20 chained turns with their
    input_items, and 5 turns of one conversation, each over a fresh connection (spread over
    both workers), never miss."""
    port = free_port()
    env = {**os.environ, "TRIODE_STORE": store[1]}
    if len(store) > 2:
        env["TRIODE_STORE_PREFIX"] = store[3]
    proc = subprocess.Popen(
        [sys.executable, "-m", "hypercorn", "--worker-class", "trio", "--workers", "2",
         "--bind", f"127.0.0.1:{port}", "triode.http.app:create_app()"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise AssertionError("hypercorn exited:\n" + proc.stderr.read())
            assert time.monotonic() < deadline, "hypercorn did not start"
            time.sleep(0.5)
        time.sleep(3)    # both workers loaded (the first healthy answer is from one)

        def call(method: str, path: str, **kw: object) -> httpx.Response:
            # A fresh connection each time, so the kernel spreads them over the workers.
            with httpx.Client(base_url=base, timeout=60) as c:
                return c.request(method, path, **kw)

        created = call("POST", "/v1/responses",
                       json={"model": MODEL, "input": "Reply with: amber 77 kite"}).json()
        misses = sum(call("GET", f"/v1/responses/{created['id']}").status_code != 200
                     for _ in range(20))
        previous, chain_failures = created["id"], 0
        for _ in range(20):
            r = call("POST", "/v1/responses", json={"model": MODEL, "input": RECALL,
                                                    "previous_response_id": previous})
            chain_failures += r.status_code != 200
            if r.status_code == 200:
                previous = r.json()["id"]
                chain_failures += call("GET", f"/v1/responses/{previous}/input_items"
                                       ).status_code != 200
        conversation = call("POST", "/v1/conversations", json={}).json()["id"]
        conversation_failures = sum(
            call("POST", "/v1/responses", json={"model": MODEL, "input": f"Reply with: w{i}",
                                                "conversation": conversation}).status_code
            != 200 for i in range(5))
        items = call("GET", f"/v1/conversations/{conversation}/items",
                     params={"order": "asc"}).json()["data"]
        assert len(items) == 10
        assert (misses, chain_failures, conversation_failures) == (0, 0, 0)
    finally:
        stop(proc, 20)


# ---- background jobs across processes --------------------------------------------------------

TERMINAL = {"completed", "incomplete", "failed", "cancelled"}


def hold_job() -> dict:
    """A job that generates 2,000+ characters (a few seconds on the bundled model)."""
    return {**{k: v for k, v in HOLD.items() if k != "stream"}, "background": True}


def test_a_job_is_polled_replayed_and_followed_from_the_other_process(servers):
    """Created on A: B polls it (queued/in_progress, then completed), B's stream=true follows
    it live to the end, and B's replay equals A's stored events."""
    a, b = servers
    job = a.http.post("/v1/responses", json=hold_job()).json()
    assert b.http.get(f"/v1/responses/{job['id']}").json()["status"] in ("queued", "in_progress")
    with b.http.stream("GET", f"/v1/responses/{job['id']}", params={"stream": "true"}) as r:
        followed = sse_events(r.read().decode())
    assert followed[0]["type"] == "response.created"
    # The hold job runs into its max_output_tokens: it ends incomplete.
    assert followed[-1]["type"] == "response.incomplete"
    assert [e["sequence_number"] for e in followed] == list(range(len(followed)))
    done = wait_until(lambda: (o := b.http.get(f"/v1/responses/{job['id']}").json())["status"]
                      in TERMINAL and o)
    assert done == followed[-1]["response"]
    replay = sse_events(a.http.get(f"/v1/responses/{job['id']}",
                                   params={"stream": "true"}).text)
    assert replay == followed


def test_a_job_is_cancelled_from_the_other_process(servers):
    """POST .../cancel on B reaches the job on A; B answers the cancelled object, as A's GET."""
    a, b = servers
    job = a.http.post("/v1/responses", json=hold_job()).json()
    wait_until(lambda: b.http.get(f"/v1/responses/{job['id']}").json()["status"]
               == "in_progress")
    r = b.http.post(f"/v1/responses/{job['id']}/cancel")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "cancelled"
    assert a.http.get(f"/v1/responses/{job['id']}").json() == r.json()
    # deleting an unfinished job on the other process is refused, a finished one is not
    assert b.http.delete(f"/v1/responses/{job['id']}").status_code == 200


def test_a_killed_process_s_job_ends_failed_within_the_lease(store):
    """The process running a job dies (SIGKILL): within the lease the other process stores it
    as failed, and a follower there gets response.failed."""
    from triode.actors.jobs import WORKER_LEASE_SECS

    with pair(store) as (a, b):
        job = a.http.post("/v1/responses", json=hold_job()).json()
        wait_until(lambda: b.http.get(f"/v1/responses/{job['id']}").json()["status"]
                   == "in_progress")
        a.proc.kill()
        killed = time.monotonic()
        failed = wait_until(
            lambda: (o := b.http.get(f"/v1/responses/{job['id']}").json())["status"]
            in TERMINAL and o, timeout=3 * WORKER_LEASE_SECS)
        assert time.monotonic() - killed < 2 * WORKER_LEASE_SECS
        assert failed["status"] == "failed"
        assert "stopped" in failed["error"]["message"]
        events = sse_events(b.http.get(f"/v1/responses/{job['id']}",
                                       params={"stream": "true"}).text)
        assert events[-1]["type"] == "response.failed"


class RedisProxy:
    """A TCP proxy to the test Redis that can be taken down (listener and every connection
    closed) and brought back on the same port: Redis going away, as a server sees it."""

    def __init__(self) -> None:
        from urllib.parse import urlparse

        target = urlparse(REDIS_URL)
        self.target = (target.hostname or "127.0.0.1", target.port or 6379)
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            assert self._listener is not None
            # shutdown wakes the thread blocked in accept(); close alone would leave the
            # listening socket open in the kernel until that accept returned.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def test_redis_going_away_and_coming_back(redis_prefix):
    """Redis stops: stored creates are 503 (nothing accepted), /health fails, the server
    keeps running; Redis returns: the same server stores again, with no restart."""
    proxy = RedisProxy()
    proxy.up()
    body = {"model": MODEL, "input": "Reply with: amber 77 kite"}
    store = ("--store", f"redis://127.0.0.1:{proxy.port}/0", "--store-prefix", redis_prefix)
    with run_server(*store) as server:
        before = server.http.post("/v1/responses", json=body)
        assert before.status_code == 200
        proxy.down()
        r = server.http.post("/v1/responses", json=body)
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        assert server.http.get("/health").status_code == 503
        proxy.up()
        created = wait_until(lambda: (r := server.http.post(
            "/v1/responses", json=body)).status_code == 200 and r.json(), timeout=20)
        assert server.http.get(f"/v1/responses/{created['id']}").status_code == 200
        assert server.http.get(f"/v1/responses/{before.json()['id']}").status_code == 200
        assert server.http.get("/health").status_code == 200
        assert server.proc.poll() is None
        proxy.down()
