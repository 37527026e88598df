"""AccessLog: ASGI middleware around the whole app that writes one access log line per
request (per WebSocket, when it closes) and keeps the HTTP figures of `/metrics`.

Outermost, so a line covers everything the request cost, a stream included: it is written
when the app's last `send` is done (or the client has gone). The app tells the middleware
which route matched (`record_route`, from its before_request hooks), so requests are counted
by route template, never by raw path: label values stay bounded. The response id and the
token counts are read from what the response carried, not asked of anyone: the response
object's `"id":"resp_…"` near the start of the body, and the `usage` of the object in the
last body chunk (a stream's terminal event); a WebSocket's are summed over its terminal
events. A request whose response has no such object is logged without them.

The middleware is the one writer of its figures, always from the trio thread and without
awaiting in between, so they need no actor of their own; `statistics()` returns a frozen
snapshot like an actor's.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Awaitable, Callable, Mapping

import attrs

from ..actors.messages import HistogramStatistics
from ..actors.model import Histogram

log = logging.getLogger("triode.access")

Scope = dict[str, Any]
Message = dict[str, Any]
App = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
               Awaitable[None]]

SCOPE_KEY = "triode.access"   # the request's AccessRecord, in the scope the app sees
UNMATCHED = "unmatched"       # the route label of a request no route matched
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
CLIENT_CLOSED = 499           # nginx's status for a request whose client left before an answer
# Seconds: a health check takes a millisecond, a long generation minutes.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    120.0, 300.0, 600.0)

# The response id is the first key of a response object (and of a stream's first event's);
# `"id":"` with its opening quote cannot be the tail of `"previous_response_id":"`.
_RESPONSE_ID = re.compile(rb'"id":"(resp_[0-9A-Za-z_-]{1,128})"')
ID_SEARCH_BYTES = 4096
# The usage object as responses/ids.py writes it; inside an output item a quote is escaped.
_USAGE = re.compile(rb'"usage":\{"input_tokens":(\d+),"input_tokens_details":'
                    rb'\{"cached_tokens":(\d+)\},"output_tokens":(\d+)')
_FRAME_START = b"\n\nevent: "
TERMINAL_FRAMES = tuple(f'{{"type":"response.{kind}"'
                        for kind in ("completed", "incomplete", "failed"))
ERROR_FRAME = '{"type":"error"'


@attrs.frozen
class Usage:
    input_tokens: int
    cached_tokens: int
    output_tokens: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens,
                     self.cached_tokens + other.cached_tokens,
                     self.output_tokens + other.output_tokens)


def response_id_in(chunk: bytes, start: int = 0) -> str | None:
    """The id of the response object that starts at `start`, if one does."""
    found = _RESPONSE_ID.search(chunk, start, start + ID_SEARCH_BYTES)
    return found.group(1).decode() if found else None


def usage_in(chunk: bytes, start: int = 0) -> Usage | None:
    """The usage of the response object after `start`, once the response has one: a queued
    or running object's usage is all 0."""
    found = _USAGE.search(chunk, start)
    if found is None or found.group(1) == b"0":
        return None
    return Usage(*(int(n) for n in found.groups()))


def last_frame(chunk: bytes) -> int:
    """Where the last SSE frame of a chunk starts (0: the chunk is one frame, or JSON)."""
    return chunk.rfind(_FRAME_START) + 1   # -1 (not found) + 1 is the start too


def summarize(record: AccessRecord, first: bytes, last: bytes) -> None:
    """The response id and usage an HTTP body carried: a response object, or a stream whose
    first event (or, when a replay starts later, whose terminal event) holds one."""
    end = last_frame(last)
    record.response_id = response_id_in(first) or response_id_in(last, end)
    record.usage = usage_in(last, end)


@attrs.define
class AccessRecord:
    """One request as the middleware sees it: filled in as the app answers."""

    route: str | None = None      # the matched route's template; None: no route matched
    status: int | None = None
    response_id: str | None = None
    usage: Usage | None = None
    responses: int = 0            # a WebSocket's terminal events
    errors: int = 0               # a WebSocket's error frames
    disconnected: bool = False
    first_body: bytes = b""       # an HTTP response's first body chunk
    last_body: bytes = b""        # and its latest one


def record_route(scope: Mapping[str, Any], rule: str | None) -> None:
    """Called by the app once Quart has matched a request (`request.url_rule.rule`)."""
    record = scope.get(SCOPE_KEY)
    if isinstance(record, AccessRecord):
        record.route = rule


@attrs.frozen
class HttpStatistics:
    in_flight: int                                   # requests and WebSockets open now
    requests: dict[tuple[str, str, str], int]        # (method, route, status) → answered
    durations: dict[tuple[str, str], HistogramStatistics]   # (method, route) → seconds


class AccessLog:
    """`enabled` switches the log line only (`--access-log`); the figures are always kept."""

    def __init__(self, app: App, *, enabled: bool = True):
        self.app = app
        self.enabled = enabled
        self._in_flight = 0
        self._requests: dict[tuple[str, str, str], int] = {}
        self._durations: dict[tuple[str, str], Histogram] = {}

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        record = AccessRecord()

        async def watched_receive() -> Message:
            message = await receive()
            if message["type"] in ("http.disconnect", "websocket.disconnect"):
                record.disconnected = True
            return message

        async def watched_send(message: Message) -> None:
            match message["type"]:
                case "http.response.start" | "websocket.http.response.start":
                    record.status = message["status"]
                case "http.response.body":
                    if body := message.get("body"):
                        record.first_body = record.first_body or body
                        record.last_body = body
                case "websocket.accept":
                    record.status = 101
                case "websocket.close" if record.status is None:
                    record.status = 403   # closed before the handshake: a refusal (ASGI)
                case "websocket.send":
                    self._websocket_frame(record, message.get("text"))
            await send(message)

        started = time.perf_counter()
        self._in_flight += 1
        try:
            await self.app({**scope, SCOPE_KEY: record}, watched_receive, watched_send)
        finally:
            self._in_flight -= 1
            if record.first_body:
                summarize(record, record.first_body, record.last_body)
            self._done(scope, record, time.perf_counter() - started)

    @staticmethod
    def _websocket_frame(record: AccessRecord, text: str | None) -> None:
        if text is None:
            return
        if text.startswith(TERMINAL_FRAMES):
            record.responses += 1
            usage = usage_in(text.encode())
            if usage is not None:
                record.usage = usage if record.usage is None else record.usage + usage
        elif text.startswith(ERROR_FRAME):
            record.errors += 1

    def _done(self, scope: Scope, record: AccessRecord, seconds: float) -> None:
        websocket = scope["type"] == "websocket"
        if record.status is None:
            # hypercorn answers 500 for an app that sent nothing; a client that left first
            # gets nothing at all
            record.status = CLIENT_CLOSED if record.disconnected else 500
        method = "GET" if websocket else scope.get("method", "GET")
        route = record.route or UNMATCHED
        label = method if method in METHODS else "other"
        key = (label, route, str(record.status))
        self._requests[key] = self._requests.get(key, 0) + 1
        if not websocket:   # a WebSocket's duration is its session's, not a latency
            histogram = self._durations.get(key[:2])
            if histogram is None:
                histogram = self._durations[key[:2]] = Histogram(DURATION_BUCKETS)
            histogram.observe(seconds)
        if self.enabled:
            log.info("%s", access_line(scope, record, seconds))

    def statistics(self) -> HttpStatistics:
        return HttpStatistics(
            in_flight=self._in_flight, requests=dict(self._requests),
            durations={key: h.statistics() for key, h in self._durations.items()})


def access_line(scope: Scope, record: AccessRecord, seconds: float) -> str:
    """`client METHOD path status duration [websocket responses=N errors=N] [response=id]
    [input_tokens=N cached_tokens=N output_tokens=N]` (a WebSocket's tokens: the sum over
    its responses); the path as it came, still percent-encoded, so a line never holds a
    control character."""
    client = scope.get("client")
    raw = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "surrogateescape")
    path = raw.decode("ascii", "backslashreplace")
    if query := scope.get("query_string"):
        path += "?" + query.decode("ascii", "backslashreplace")
    websocket = scope["type"] == "websocket"
    parts = [client[0] if client else "-", "GET" if websocket else scope.get("method", "-"),
             path, str(record.status), f"{seconds:.3f}s"]
    if websocket:
        parts += ["websocket", f"responses={record.responses}", f"errors={record.errors}"]
    if record.response_id is not None:
        parts.append(f"response={record.response_id}")
    if record.usage is not None:
        parts += [f"input_tokens={record.usage.input_tokens}",
                  f"cached_tokens={record.usage.cached_tokens}",
                  f"output_tokens={record.usage.output_tokens}"]
    return " ".join(parts)
