"""Keep-alive connections survive answers sent before the request body was read (404/405
from routing, 401 from before_request, routes that never read a body), and the server
closes a connection whenever it answers `Connection: close` (see http/guard.py)."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlparse

import pytest

from ..conftest import run_server, wait_until

BODY = json.dumps({"model": "triode-tiny", "input": "Reply with: hello"}).encode()


def connect(server) -> socket.socket:
    url = urlparse(server.base_url)
    return socket.create_connection((url.hostname, url.port))


def read_response(sock: socket.socket, timeout: float = 3.0) -> tuple[int, dict, bytes] | None:
    """One response (status, headers, body), or None if the server closed the socket."""
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin1").split("\r\n")
    headers = {k.strip().lower(): v.strip()
               for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, body


def early_answer_then_next(server, method: str, path: str, *, chunked: bool = False,
                           auth: str = "") -> tuple[int, int]:
    """Sends the headers, then (once the app may have answered) the body; then a second
    request on the same connection. Returns both statuses (a hang fails on timeout)."""
    body = (f"{len(BODY):x}\r\n".encode() + BODY + b"\r\n0\r\n\r\n") if chunked else BODY
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(BODY)}"
    with connect(server) as sock:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     f"\r\n{framing}\r\n\r\n".encode())
        time.sleep(0.05)
        sock.sendall(body)
        first = read_response(sock)
        sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
        second = read_response(sock)
    assert first is not None and second is not None
    return first[0], second[0]


@pytest.mark.parametrize("method,path,status", [
    ("POST", "/v1/assistants", 404),
    ("PUT", "/v1/models", 405),
    ("POST", "/v1/responses/resp_nope/cancel", 404),
    ("DELETE", "/v1/responses/resp_nope", 404),
    ("POST", "/v1/responses", 200),
])
@pytest.mark.parametrize("chunked", [False, True])
def test_next_request_is_answered_after_an_early_answer(server, method, path, status, chunked):
    before = server.health()["tasks"]
    assert early_answer_then_next(server, method, path, chunked=chunked) == (status, 200)
    wait_until(lambda: server.health()["tasks"] <= before, timeout=10)


def test_next_request_is_answered_after_a_401():
    with run_server("--api-key", "k") as server:
        assert early_answer_then_next(server, "POST", "/v1/responses",
                                      auth="Authorization: Bearer k\r\n") == (401, 200)


def test_server_closes_when_it_answers_connection_close(server):
    with connect(server) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert read_response(sock)[0] == 200
        assert read_response(sock) is None       # closed, not left open


def test_too_large_body_is_413_and_the_connection_closes(server):
    with connect(server) as sock:
        sock.sendall(f"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: "
                     f"{64 * 1024 * 1024 + 1}\r\n\r\n".encode())
        status, headers, _ = read_response(sock)
        assert (status, headers.get("connection")) == (413, "close")
        assert read_response(sock) is None
