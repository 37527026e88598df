"""Keep-alive connections survive answers sent before the request body was read (404/405
from routing, 401 from before_request, 400 from the query, routes that never read a body),
the server closes a connection whenever it answers `Connection: close` (see http/guard.py),
and a client gone before its body leaves nothing behind: no socket in CLOSE-WAIT, no task.
The matrix covers every route of the app's URL map."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

import pytest

from triode.http.app import OPEN_PATHS, create_app
from triode.http.body import MAX_BODY_BYTES

from ..conftest import Server, run_server, wait_until

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


def test_an_early_answer_is_sent_before_the_body_arrives():
    """A client that sends its headers and waits (as an `Expect: 100-continue` one does)
    gets its 401 at once, not after the guard's drain bound (5 s: the 2 s read would time
    out); the body it then sends is drained and the connection serves the next request."""
    with run_server("--api-key", "k") as server, connect(server) as sock:
        sock.sendall(f"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(BODY)}\r\n\r\n".encode())
        first = read_response(sock, timeout=2.0)
        assert first is not None and first[0] == 401
        assert json.loads(first[2])["error"]["code"] == "invalid_api_key"
        assert first[1].get("connection") != "close"
        sock.sendall(BODY)
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n")
        second = read_response(sock)
        assert second is not None and second[0] == 200


def test_an_early_answer_whose_body_never_comes_closes_the_connection():
    """The body of an early-answered request that never arrives: the server closes the
    connection once its drain bound has passed, it does not hang open."""
    with run_server("--api-key", "k") as server, connect(server) as sock:
        sock.sendall(f"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: "
                     f"{len(BODY)}\r\n\r\n".encode())
        first = read_response(sock, timeout=2.0)
        assert first is not None and first[0] == 401
        assert read_response(sock, timeout=10.0) is None      # closed by the server


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


# ---- the matrix: every route x every early answer x (keep-alive reuse | client gone) ---------

KEY = "k"
AUTH = f"Authorization: Bearer {KEY}\r\n"
PLACEHOLDERS = {"response_id": "resp_nope", "conversation_id": "conv_nope",
                "item_id": "msg_nope", "model_id": "no-such-model"}
# A query each list route refuses before it looks at anything else (400 naming the field).
# Routes that validate the body before they look the id up (BODY is a create, not theirs).
BODY_FIRST = {("POST", "/v1/conversations/<conversation_id>"),
              ("POST", "/v1/conversations/<conversation_id>/items")}
OVERSIZE = f"Content-Length: {MAX_BODY_BYTES + 1}\r\n"
BAD_QUERIES = {"/v1/responses/<response_id>": "starting_after=x",
               "/v1/responses/<response_id>/input_items": "limit=0",
               "/v1/conversations/<conversation_id>/items": "limit=0"}


def app_routes() -> dict[str, set[str]]:
    """The app's HTTP routes under /v1 (each is also mounted without it): path -> methods."""
    routes: dict[str, set[str]] = {}
    for rule in create_app().url_map.iter_rules():
        if rule.rule.startswith("/v1/") and not rule.websocket:
            routes.setdefault(rule.rule, set()).update((rule.methods or set()) - {"HEAD",
                                                                                    "OPTIONS"})
    return routes


def concrete(rule: str) -> str:
    return re.sub(r"<(?:\w+:)?(\w+)>", lambda m: PLACEHOLDERS[m.group(1)], rule)


def early_cases() -> Iterator[tuple[str, str, str, int]]:
    """(method, path, extra headers, the status answered) for every route."""
    for rule, methods in sorted(app_routes().items()):
        path = concrete(rule)
        for method in sorted(methods):
            if path not in OPEN_PATHS:
                yield method, path, "", 401
            if "<" in rule:   # unknown ids: 404, or 400 where the body is checked first
                yield method, path, AUTH, 400 if (method, rule) in BODY_FIRST else 404
            if method == "POST":   # too large: 413, or the answer of a route that reads none
                reads_none = path.endswith(("/cancel", "/load", "/unload"))
                yield (method, path, AUTH + OVERSIZE, 404 if reads_none else 413)
        if rule in BAD_QUERIES:
            yield "GET", f"{path}?{BAD_QUERIES[rule]}", AUTH, 400
        yield next(m for m in ("PUT", "PATCH") if m not in methods), path, AUTH, 405
    yield "POST", "/v1/no-such-route", AUTH, 404
    yield "GET", "/v1/responses/resp_nope/no-such-part", AUTH, 404


CASES = sorted(set(early_cases()))


@pytest.fixture(scope="module")
def keyed() -> Iterator[Server]:
    with run_server("--api-key", KEY) as srv:
        srv.http.headers["Authorization"] = f"Bearer {KEY}"
        yield srv


LEFT_SECS = 3.0


def close_wait(port: int) -> int:
    """Sockets of this machine on local port `port` in CLOSE-WAIT (the peer closed; the
    owner never did), from /proc/net/tcp{,6}."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            count += int(local.rsplit(":", 1)[1], 16) == port and state == "08"
    return count


def send_head(sock: socket.socket, method: str, path: str, headers: str) -> None:
    if "Content-Length" not in headers:
        headers += f"Content-Length: {len(BODY)}\r\n"
    sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"{headers}\r\n".encode())


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc/net/tcp")
@pytest.mark.parametrize("method,path,headers,status", CASES,
                         ids=[f"{m} {p} {s}" for m, p, _, s in CASES])
@pytest.mark.parametrize("client", ["reuses", "goes"])
def test_early_answer_matrix(keyed, client, method, path, headers, status):
    """Every route's early answers: on keep-alive the next request is answered (or, after a
    413, the server closes the connection); a client gone before sending its body leaves no
    CLOSE-WAIT socket and no task behind."""
    port = urlparse(keyed.base_url).port
    before = keyed.health()["tasks"]
    with connect(keyed) as sock:
        send_head(sock, method, path, headers)
        if client == "goes":
            time.sleep(0.05)
            sock.close()
        elif OVERSIZE in headers:   # answered at once, and closed: that body is never read
            first = read_response(sock)
            assert first is not None and first[0] == status, first
            assert first[1].get("connection") == "close", first
            assert read_response(sock) is None
        else:                 # the body arrives after the app has answered (or could have)
            time.sleep(0.05)
            sock.sendall(BODY)
            first = read_response(sock)
            assert first is not None and first[0] == status, first
            sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n".encode())
            second = read_response(sock)
            assert second is not None and second[0] == 200, second
    # Within LEFT_SECS, less than hypercorn's 5 s keep-alive timer: a connection that
    # waits for it (http/transport.py) fails here.
    wait_until(lambda: close_wait(port) == 0, timeout=LEFT_SECS)
    wait_until(lambda: keyed.health()["tasks"] <= before, timeout=LEFT_SECS)
