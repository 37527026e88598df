"""ConnectionGuard in process, between a fake server (receive/send) and a fake app: an answer
sent before the request body has arrived goes out at once, and the cycle's end waits for the
body (bounded); a body too large to drain gets `Connection: close`."""

from __future__ import annotations

import trio

from triode.http.guard import ConnectionGuard


def scope(*headers: tuple[bytes, bytes]) -> dict:
    return {"type": "http", "method": "POST", "path": "/v1/responses", "headers": list(headers)}


async def early_answer(scope, receive, send):
    """An app that answers 401 without reading the body."""
    await send({"type": "http.response.start", "status": 401, "headers": []})
    await send({"type": "http.response.body", "body": b"no", "more_body": False})


class Server:
    """The server side: the request body arrives when `arrive` is called; every message the
    app sends is kept with the (virtual) time it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, dict]] = []
        self.body = trio.Event()

    async def receive(self) -> dict:
        await self.body.wait()
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(self, message: dict) -> None:
        self.sent.append((trio.current_time(), message))


async def test_an_early_answer_is_sent_at_once_and_its_end_waits_for_the_body(
        autojump_clock, nursery):
    """The status and body go out before the request body is in; the last, empty send waits
    until the server has received the body, which the app's own receive pulls."""
    server = Server()
    guard = ConnectionGuard(early_answer, max_body_bytes=1000)
    began = trio.current_time()

    async def app_then_reader(scope, receive, send):
        nursery.start_soon(receive)   # quart-trio keeps pulling the body while the view runs
        await early_answer(scope, receive, send)

    guard.app = app_then_reader
    done = trio.Event()

    async def serve():
        await guard(scope((b"content-length", b"2")), server.receive, server.send)
        done.set()

    nursery.start_soon(serve)
    await trio.sleep(1)
    assert [m["type"] for _, m in server.sent] == ["http.response.start", "http.response.body"]
    assert server.sent[1][1] == {"type": "http.response.body", "body": b"no", "more_body": True}
    assert all(t == began for t, _ in server.sent)
    assert not done.is_set()
    server.body.set()
    await done.wait()
    assert server.sent[-1][1] == {"type": "http.response.body", "body": b"",
                                  "more_body": False}
    assert server.sent[-1][0] == began + 1


async def test_a_body_that_never_comes_ends_the_cycle_after_drain_secs(autojump_clock):
    """The wait for the body is bounded: the cycle ends after `drain_secs` without it (and
    hypercorn closes the connection, h11 being mid-request)."""
    server = Server()
    guard = ConnectionGuard(early_answer, max_body_bytes=1000, drain_secs=5)
    began = trio.current_time()
    await guard(scope((b"content-length", b"2")), server.receive, server.send)
    ended, last = server.sent[-1]
    assert last == {"type": "http.response.body", "body": b"", "more_body": False}
    assert ended - began == 5


async def test_a_body_too_large_to_drain_closes_the_connection_at_once(autojump_clock):
    """Over `max_body_bytes` the body is never waited for: the answer says `Connection:
    close` and the cycle ends with it."""
    server = Server()
    guard = ConnectionGuard(early_answer, max_body_bytes=10)
    began = trio.current_time()
    await guard(scope((b"content-length", b"11")), server.receive, server.send)
    start, body = server.sent[0][1], server.sent[-1][1]
    assert (b"connection", b"close") in start["headers"]
    assert body == {"type": "http.response.body", "body": b"no", "more_body": False}
    assert all(t == began for t, _ in server.sent)


async def test_a_request_without_a_body_is_answered_as_the_app_sends_it(autojump_clock):
    """No content-length and not chunked: nothing to wait for, the messages pass unchanged."""
    server = Server()
    await ConnectionGuard(early_answer, max_body_bytes=10)(scope(), server.receive,
                                                           server.send)
    assert [m for _, m in server.sent] == [
        {"type": "http.response.start", "status": 401, "headers": []},
        {"type": "http.response.body", "body": b"no", "more_body": False}]
