"""Clients that stop reading: `--write-timeout` disconnects one that takes nothing for that
long (its streaming response ends `cancelled`, as on a disconnect), and SIGTERM/SIGINT with
such readers attached still ends within the shutdown timeout (http/transport.py).

A stalled reader is a raw socket with a 4 KiB receive buffer that never reads: a "hold"
stream (test_spine.HOLD, thousands of ~230-byte events) fills both sides' buffers within a
second or two, and then the server's next write cannot complete."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from urllib.parse import urlparse

import pytest

from triode.http.transport import FLUSH_SECS

from ..conftest import Server, run_server, wait_until
from .test_connections import close_wait
from .test_spine import HOLD

STREAM = json.dumps({**HOLD, "max_output_tokens": 3000}).encode()


def stalled_reader(server: Server, body: bytes = STREAM) -> socket.socket:
    """A connection that sent a streaming create and will never read its answer."""
    url = urlparse(server.base_url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((url.hostname, url.port))
    sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return sock


def read_to_end(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server wrote, up to its close (fails if it is still open after
    `timeout` seconds of silence)."""
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def response_id(data: bytes) -> str:
    found = re.search(rb'"id":"(resp_[0-9a-f]+)"', data)
    assert found, data[:500]
    return found.group(1).decode()


def test_a_reader_that_takes_nothing_is_disconnected_after_the_write_timeout():
    with run_server("--write-timeout", "2", "--log-level", "info") as srv:
        port = urlparse(srv.base_url).port
        before = srv.health()["tasks"]
        sock = stalled_reader(srv)
        # The server's writes stall, then the one it is in stops after 2 s and it closes the
        # connection: the response stops generating, long before its 3,000 tokens.
        wait_until(lambda: "took nothing of a" in "".join(srv.log), timeout=30)
        wait_until(lambda: srv.health()["slots"]["busy"] == 0, timeout=10)
        data = read_to_end(sock, timeout=10)   # what the buffers held, then the server's FIN
        sock.close()
        rid = response_id(data)
        stored = wait_until(lambda: (r := srv.http.get(f"/v1/responses/{rid}").json())
                            ["status"] != "in_progress" and r, timeout=10)
        assert stored["status"] == "cancelled", stored
        assert stored["usage"] is None or stored["usage"]["output_tokens"] < 3000
        assert b"response.completed" not in data and b"response.incomplete" not in data
        wait_until(lambda: close_wait(port) == 0, timeout=5)
        wait_until(lambda: srv.health()["tasks"] <= before, timeout=10)
        # The server goes on serving.
        ok = srv.http.post("/v1/responses", json={"model": "triode-tiny",
                                                  "input": "Reply with: hello"})
        assert ok.status_code == 200 and ok.json()["status"] == "completed"


def test_a_slow_reader_that_keeps_reading_is_not_disconnected():
    """The write timeout is about a reader that takes nothing, not a slow one: reading 1 KiB
    every 50 ms (slower than the server writes, so its writes wait on every read) gets the
    whole stream."""
    with run_server("--write-timeout", "2") as srv:
        sock = stalled_reader(srv, json.dumps({**HOLD, "max_output_tokens": 300}).encode())
        sock.settimeout(10)
        data = b""
        while b"event: response.incomplete" not in data:
            chunk = sock.recv(1024)
            assert chunk, data[-500:]
            data += chunk
            time.sleep(0.05)
        sock.close()
        assert data.count(b"event: response.output_text.delta") > 250


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_shutdown_with_stalled_readers_ends_within_the_shutdown_timeout(signum):
    """Stalled readers do not hold the shutdown: the process exits 0 within
    --shutdown-timeout (+ FLUSH_SECS for the last events), though --write-timeout alone
    would hold them for minutes; their responses end `failed` with the shutdown reason."""
    shutdown_timeout = 2
    with run_server("--shutdown-timeout", str(shutdown_timeout), "--write-timeout", "600",
                    "--log-level", "info") as srv:
        readers = [stalled_reader(srv) for _ in range(3)]
        wait_until(lambda: srv.health()["slots"]["busy"] == 3, timeout=30)
        time.sleep(2)   # their buffers fill and the writes stall
        srv.proc.send_signal(signum)
        assert srv.proc.wait(shutdown_timeout + FLUSH_SECS + 10) == 0, "".join(srv.log)
        log = "".join(srv.log)
        assert "Traceback" not in log, log
        assert "shutdown: 0 responses finished, 3 cut" in log, log
        for sock in readers:
            data = read_to_end(sock, timeout=5)
            sock.close()
            assert b"response.completed" not in data
