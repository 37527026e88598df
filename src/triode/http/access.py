"""AccessLog: ASGI middleware around the whole app that writes one access log line per
request (per WebSocket, when it closes) and keeps the HTTP figures of `/metrics`.

Outermost, so a line covers everything the request cost, a stream included: it is written
when the app's last `send` is done (or the client has gone). The middleware puts an
`AccessRecord` into the scope the app sees (`SCOPE_KEY`, `access_record`) and the app tells
it what only the app knows: which route matched (`record_route`, from its before_request
hooks), so requests are counted by route template, never by raw path and label values stay
bounded; the response a request answered about (`record_response`, `record_object`) and its
token counts once it has them (`record_usage`); a stream's events as they are sent
(`record_event`), which for a WebSocket counts its responses and error frames and sums their
tokens. Nothing is read back from the bytes sent: the middleware sees only each message's
type and status. A request the app told nothing is logged without them.

The middleware is the one writer of its figures, always from the trio thread and without
awaiting in between, so they need no actor of their own; `statistics()` returns a frozen
snapshot like an actor's.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Awaitable, Callable, Mapping

import attrs

from ..actors.messages import HistogramStatistics
from ..actors.model import Histogram
from ..responses.lifecycle import TERMINAL_EVENTS, TERMINAL_STATUSES
from ..responses.objects import (CompactedHistory, McpCallItem, ResponseEvent, ResponseObject,
                                StreamEvent, Usage)

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

@attrs.define
class AccessRecord:
    """One request as the middleware sees it: filled in as the app answers, by the middleware
    (status, disconnect) and by the app telling it (the rest)."""

    route: str | None = None      # the matched route's template; None: no route matched
    status: int | None = None
    response_id: str | None = None
    usage: Usage | None = None
    responses: int = 0            # a stream's terminal events (a WebSocket's line shows them)
    errors: int = 0               # a stream's error events (a WebSocket's line shows them)
    accepted_drafts: int | None = None   # a generated response's accepted draft tokens
    mcp_calls: int = 0            # MCP calls its (terminal) responses ran
    disconnected: bool = False
    tenant: str | None = None     # the named tenant whose key authenticated it

    def record_tenant(self, name: str) -> None:
        """The named tenant (of --api-keys-file) whose key the request carried: its line
        says so and /metrics counts it."""
        self.tenant = name

    def record_response(self, response_id: str) -> None:
        """The response the request answered about: created, read, streamed, cancelled."""
        self.response_id = response_id

    def record_usage(self, used: Usage | None) -> None:
        """Tokens a response the request answered with used; a WebSocket's several
        responses add up."""
        if used is not None:
            self.usage = used if self.usage is None else self.usage + used

    def record_drafts(self, accepted: int) -> None:
        """Output tokens of the response this request generated that speculative decoding
        drafted and the model accepted."""
        self.accepted_drafts = accepted

    def record_object(self, obj: ResponseObject | CompactedHistory) -> None:
        """A response object (or a compaction) the request answered with: its id, and its
        usage once it has one. A queued or running object's usage is all 0 until it ends,
        so only an object in a terminal status (a compaction has no status: it is done)
        counts its tokens."""
        self.record_response(obj.id)
        if isinstance(obj, CompactedHistory) or obj.status in TERMINAL_STATUSES:
            self.record_usage(obj.usage)
            self._count_mcp(obj)

    def record_event(self, event: StreamEvent) -> None:
        """A stream event about to be sent: a terminal one ends a response (its tokens are
        counted). The other events count for nothing."""
        if event.type in TERMINAL_EVENTS:
            self.responses += 1
            if isinstance(event, ResponseEvent):
                self.record_usage(event.response.usage)
                self._count_mcp(event.response)

    def _count_mcp(self, obj: ResponseObject | CompactedHistory) -> None:
        self.mcp_calls += sum(1 for item in obj.output if isinstance(item, McpCallItem))

    def record_error(self) -> None:
        """An error frame about to be sent (a WebSocket's)."""
        self.errors += 1



def access_record(scope: Mapping[str, Any]) -> AccessRecord:
    """The request's AccessRecord, for the app to tell it what it answered (Quart's
    `request.scope`, `websocket.scope`); outside the middleware (an app driven without it),
    a record nobody reads."""
    record = scope.get(SCOPE_KEY)
    return record if isinstance(record, AccessRecord) else AccessRecord()


def record_route(scope: Mapping[str, Any], rule: str | None) -> None:
    """Called by the app once Quart has matched a request (`request.url_rule.rule`)."""
    access_record(scope).route = rule


@attrs.frozen
class HttpStatistics:
    in_flight: int                                   # requests and WebSockets open now
    requests: dict[tuple[str, str, str], int]        # (method, route, status) → answered
    durations: dict[tuple[str, str], HistogramStatistics]   # (method, route) → seconds
    # Named tenants only (an --api-keys-file): (tenant, status) → answered, and the tokens
    # their responses used, (tenant, kind) → tokens (kind: input, cached, output).
    tenant_requests: dict[tuple[str, str], int] = attrs.Factory(dict)
    tenant_tokens: dict[tuple[str, str], int] = attrs.Factory(dict)


@attrs.frozen
class Connection:
    """An open request about a response, as the live page shows it."""

    client: str           # host:port
    request: str          # "POST /v1/responses", "GET /v1/responses/{response_id}", ...
    since: float          # wall clock


class AccessLog:
    """`enabled` switches the log line only (`--access-log`); the figures are always kept."""

    def __init__(self, app: App, *, enabled: bool = True):
        self.app = app
        self.enabled = enabled
        self._in_flight = 0
        self._open: dict[int, tuple[Scope, AccessRecord, float]] = {}   # id(record) → ...
        self._requests: dict[tuple[str, str, str], int] = {}
        self._durations: dict[tuple[str, str], Histogram] = {}
        self._tenant_requests: dict[tuple[str, str], int] = {}
        self._tenant_tokens: dict[tuple[str, str], int] = {}

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
                case "websocket.accept":
                    record.status = 101
                case "websocket.close" if record.status is None:
                    record.status = 403   # closed before the handshake: a refusal (ASGI)
            await send(message)

        started = time.perf_counter()
        self._in_flight += 1
        self._open[id(record)] = (scope, record, time.time())
        try:
            await self.app({**scope, SCOPE_KEY: record}, watched_receive, watched_send)
        finally:
            self._in_flight -= 1
            del self._open[id(record)]
            self._done(scope, record, time.perf_counter() - started)

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
        if record.tenant is not None:
            self._count_tenant(record.tenant, record)
        if self.enabled:
            log.info("%s", access_line(scope, record, seconds))

    def connections(self) -> dict[str, list[Connection]]:
        """The open requests (and WebSockets) about each response: its creating request
        while it waits or streams, the streams that follow it."""
        found: dict[str, list[Connection]] = {}
        for scope, record, since in self._open.values():
            if record.response_id is None:
                continue
            client = scope.get("client")
            method = "GET" if scope["type"] == "websocket" else scope.get("method", "-")
            found.setdefault(record.response_id, []).append(Connection(
                f"{client[0]}:{client[1]}" if client else "-",
                f"{method} {record.route or UNMATCHED}", since))
        return found

    def _count_tenant(self, name: str, record: AccessRecord) -> None:
        key = (name, str(record.status))
        self._tenant_requests[key] = self._tenant_requests.get(key, 0) + 1
        if record.usage is not None:
            for kind, n in (("input", record.usage.input_tokens),
                            ("cached", record.usage.cached_tokens),
                            ("output", record.usage.output_tokens)):
                self._tenant_tokens[(name, kind)] = self._tenant_tokens.get((name, kind), 0) + n

    def statistics(self) -> HttpStatistics:
        return HttpStatistics(
            in_flight=self._in_flight, requests=dict(self._requests),
            durations={key: h.statistics() for key, h in self._durations.items()},
            tenant_requests=dict(self._tenant_requests),
            tenant_tokens=dict(self._tenant_tokens))


def access_line(scope: Scope, record: AccessRecord, seconds: float) -> str:
    """`client METHOD path status duration [websocket responses=N errors=N] [response=id]
    [input_tokens=N cached_tokens=N output_tokens=N] [accepted_drafts=N] [mcp_calls=N]`
    (a WebSocket's
    tokens: the sum over
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
    if record.tenant is not None:
        parts.append(f"tenant={record.tenant}")
    if record.response_id is not None:
        parts.append(f"response={record.response_id}")
    if record.usage is not None:
        parts += [f"input_tokens={record.usage.input_tokens}",
                  f"cached_tokens={record.usage.cached_tokens}",
                  f"output_tokens={record.usage.output_tokens}"]
    if record.accepted_drafts is not None:
        parts.append(f"accepted_drafts={record.accepted_drafts}")
    if record.mcp_calls:
        parts.append(f"mcp_calls={record.mcp_calls}")
    return " ".join(parts)
