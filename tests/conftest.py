"""Shared fixtures: real triode servers (a real process, hypercorn on a free port, the bundled
model) and clients for them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from typing import Iterator

import httpx
import pytest

from triode.model import blas

# MKL loads before MLX or never (model/blas.py): the tests that need it (cpu_attention,
# precision, gguf) must not depend on which test module a worker happened to import first.
blas.preload_blas("auto")

STARTUP_TIMEOUT = 120.0


class Server:
    def __init__(self, proc: subprocess.Popen, base_url: str, log: list[str]):
        self.proc = proc
        self.base_url = base_url
        self.log = log
        self.http = httpx.Client(base_url=base_url, timeout=60.0)

    def client(self, **kwargs):
        import openai

        return openai.OpenAI(base_url=self.base_url + "/v1", api_key=kwargs.pop("api_key", "sk-test"),
                             max_retries=0, timeout=60.0, **kwargs)

    def health(self) -> dict:
        return self.http.get("/health").json()


@contextlib.contextmanager
def run_server(*flags: str, env: dict[str, str] | None = None) -> Iterator[Server]:
    """Starts `python -m triode serve --port 0 FLAGS` and waits for its listening line."""
    cmd = [sys.executable, "-m", "triode", "serve", "--port", "0", "--log-level", "warning",
           *flags]
    # A test's server stops at its end: a short drain (the default waits 30 s for work still
    # running); tests of the shutdown itself pass --shutdown-timeout.
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "TRIODE_SHUTDOWN_TIMEOUT": "2", **(env or {})})
    log: list[str] = []
    ready = threading.Event()
    url: list[str] = []

    def pump() -> None:
        for line in proc.stderr:
            log.append(line)
            if line.startswith("triode listening on ") and not url:
                url.append(line.split()[-1])
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        if not ready.wait(STARTUP_TIMEOUT) or not url:
            raise RuntimeError("triode did not start:\n" + "".join(log))
        server = Server(proc, url[0], log)
        yield server
        server.http.close()
    finally:
        if proc.poll() is not None and url:   # it ended before the test stopped it
            signal_name = f" (signal {-proc.returncode})" if proc.returncode < 0 else ""
            print(f"triode exited with status {proc.returncode}{signal_name} during the test; "
                  "its last log lines:\n" + "".join(log[-40:]), file=sys.stderr)
        stop(proc, 10)


def stop(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    with run_server() as s:
        yield s


@pytest.fixture(scope="session")
def client(server):
    return server.client()


def completed(client, *, stream: bool, **request):
    """`responses.create(**request)`'s response: the answer, or with `stream` the terminal
    event's, which must be `response.completed` (a test of a turn that must end)."""
    if not stream:
        return client.responses.create(**request)
    events = list(client.responses.create(stream=True, **request))
    assert events[-1].type == "response.completed", [e.type for e in events[-3:]]
    return events[-1].response


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.02):
    """Polls `predicate` until it is truthy; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


# ---- Redis ----------------------------------------------------------------------------------
# A real Redis server (CI and the dev machines run one at 127.0.0.1:6379; TRIODE_TEST_REDIS
# names another). Each test gets its own key prefix and its keys are deleted afterwards.

REDIS_URL = os.environ.get("TRIODE_TEST_REDIS", "redis://127.0.0.1:6379/0")


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A fresh key prefix on the test Redis; every key under it is deleted at the end."""
    import uuid

    import redis

    client = redis.Redis.from_url(REDIS_URL)
    prefix = f"triode-test-{uuid.uuid4().hex[:12]}"
    try:
        yield prefix
    finally:
        keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
