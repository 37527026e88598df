"""ConnectionGuard: ASGI middleware between hypercorn (trio worker) and the Quart-Trio app
that keeps HTTP/1.1 connections sound when a response does not read the request body.

Two faults, both at the seam between hypercorn 0.18 and quart-trio 0.12:

1. hypercorn finishes each request/response cycle *inside the app's final `send`*:
   HTTPStream._send_closed → H11Protocol._maybe_recycle, which first sends the app
   `http.disconnect`, then either recycles the h11 connection and restarts the keep-alive
   timer or, when the cycle cannot be reused (our `Connection: close`, or the request body
   not yet received: h11 `their_state` is still SEND_BODY), closes the socket
   (TCPServer._close). quart-trio's handle_messages ends on that `http.disconnect` and
   cancels the nursery of the very task that is running _maybe_recycle; the rest of it is
   cut at its next checkpoint: the close (send_eof) or the keep-alive timer restart never
   happen. The connection then hangs: the request body arrives later, h11 reaches DONE
   without start_next_cycle, the next request gets PAUSED and H11Protocol._handle_events
   waits on `can_read` forever; it stops reading, so a client's FIN is never seen
   (CLOSE-WAIT) and the connection's tasks stay. Fix: the final response-body `send` is
   shielded, so hypercorn's own bookkeeping always completes.

2. An answer sent before the body has arrived (404/405 from routing, 401 from
   before_request, routes that never read a body, 413) leaves the cycle unfinished, so
   even with (1) hypercorn must close the connection. Fix: the answer is sent at once
   (its status, headers and body: a client waiting for it, as one that sends headers and
   waits does, has it without delay), and only the cycle's end, the last empty body
   `send`, waits (bounded, DRAIN_SECS) until the body has been received, which
   quart-trio's handle_messages keeps pulling while the view runs; the connection is then
   reused as usual. A body that does not arrive in DRAIN_SECS leaves h11 mid-request, and
   hypercorn closes the connection at that end. A body that is too large (413) gets
   `Connection: close` at once instead, and is never drained.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import trio

DRAIN_SECS = 5.0

Scope = dict[str, Any]
Message = dict[str, Any]


class ConnectionGuard:
    def __init__(self, app: Callable[..., Awaitable[None]], *, max_body_bytes: int,
                 drain_secs: float = DRAIN_SECS):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.drain_secs = drain_secs

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length, chunked = None, False
        for name, value in scope["headers"]:
            if name.lower() == b"content-length":
                length = int(value) if value.strip().isdigit() else None
            elif name.lower() == b"transfer-encoding":
                chunked = True
        received = trio.Event()   # the whole request body is in (or the client is gone)
        if not chunked and not length:
            received.set()
        drainable = chunked or (length or 0) <= self.max_body_bytes

        async def guarded_receive() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                received.set()
            return message

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not received.is_set() \
                    and not drainable:
                message = {**message, "headers": [*message.get("headers", ()),
                                                   (b"connection", b"close")]}
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                if drainable and not received.is_set():
                    # The answer goes out now; the cycle ends once the body is in.
                    if message.get("body"):
                        await send({**message, "more_body": True})
                    with trio.move_on_after(self.drain_secs):
                        await received.wait()
                    message = {"type": "http.response.body", "body": b"",
                               "more_body": False}
                with trio.CancelScope(shield=True):
                    await send(message)
            else:
                await send(message)

        await self.app(scope, guarded_receive, guarded_send)
