"""Responses WebSocket mode: `GET /v1/responses` (and `/responses`) upgraded to a WebSocket.

The protocol of OpenAI's WebSocket mode, as the Agents SDK (`OpenAIResponsesWSModel`),
openai-python's `client.responses.connect()` and Codex CLI speak it (docs/websocket.md):
each `{"type": "response.create", ...}` text frame carries a `POST /v1/responses` body and is
answered with the same typed events as the SSE stream, one JSON text frame per event, ending
at `response.completed` / `response.incomplete` / `response.failed`. A request the HTTP route
would refuse is answered with one `{"type": "error", "error": {...}, "status": N}` frame and the
socket stays open. Creates run one after another per lane (`stream_id`, FIFO; the default
lane has none); different lanes run side by side.

Transport only: every create goes through `Turns.create` like an HTTP one, and closing the
socket abandons the response it is generating, as an SSE disconnect does. Each socket owns
one `LocalResponses` (the turn service's connection-local responses, as OpenAI's WebSocket
mode defines them: `store: false` responses and warm-ups made on the socket can be continued
with `previous_response_id` there) and hands it to `Turns.create` / `Turns.warm`
(`generate: false`, or `prompt_cache_options.prewarm: true`: a warm-up, nothing generated).
A continuation that fails (an error frame, or a response that ends `failed`) first evicts the
response it continued from the socket's `LocalResponses`, as Open Responses' WebSocket mode
requires. `response.steer` is answered with `response.steer.failed`: steering is not built.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Sequence

import trio
from quart import websocket

from ..actors.limits import TenantLimitsHandle
from ..actors.supervisor import SupervisorHandle
from ..errors import APIError, InvalidRequest, PayloadTooLarge, ServerError
from ..responses.convert import structure
from ..responses.lifecycle import TERMINAL_EVENTS
from ..responses.objects import StreamEvent, dumps, plain
from ..responses.wire import CreateResponse
from ..service.turns import LocalResponses, Turns
from ..tenants import Caller
from .access import access_record
from .caller import caller
from .body import MAX_BODY_BYTES, MAX_JSON_DEPTH, check_body
from . import sse
from .routes import api, handles

log = logging.getLogger(__name__)

# Fields of a `response.create` frame that belong to the socket, not to the create body:
# `stream` is implicit (the Agents SDK and Codex send `true`), `stream_id` names the lane,
# `generate: false` asks for a warm-up.
ENVELOPE = frozenset({"type", "stream", "stream_id", "generate"})
# Frames a client sends that need no answer: Codex acknowledges each response it consumed.
ACKNOWLEDGEMENTS = frozenset({"response.processed"})
# The fields of a `response.steer` frame (openai's `ResponseSteerEvent`: "accepts only
# `type`, `previous_response_id`, and `input`").
STEER_FIELDS = frozenset({"type", "previous_response_id", "input"})

LANE_QUEUE = 4           # creates waiting on one lane; past it the socket stops reading
MAX_NAMED_LANES = 32     # distinct stream_ids per socket, as OpenAI's service allows
_STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")



async def responses_socket() -> None:
    """One Responses WebSocket; authenticated before this runs (the app's
    `before_websocket`)."""
    await websocket.accept()
    h = handles()
    async with trio.open_nursery() as nursery:
        await Socket(h.turns, nursery, caller(), h.limits).serve()


for _path in ("/v1/responses", "/responses"):
    api.add_websocket(_path, endpoint=f"socket{_path.replace('/', '_')}",
                      view_func=responses_socket)


class Socket:
    """One socket: a reader that parses frames and hands creates to their lane, one task per
    lane that runs them in order, and one lock so frames leave whole and in order (with
    permessage-deflate, the compressor's order is the wire's order)."""

    def __init__(self, turns: Turns, nursery: trio.Nursery, caller: Caller,
                 limits: TenantLimitsHandle | None = None):
        """`caller`: whose socket it is (its key's tenant). `limits`: each
        `response.create` counts as a request of that tenant (its requests_per_minute; the
        upgrade counted one already)."""
        self._turns = turns
        self._caller = caller
        self._limits = limits
        self._nursery = nursery
        self._lanes: dict[str | None, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._send_lock = trio.Lock()
        self._local = LocalResponses()
        self._streaming: dict[str, str] = {}   # response id -> its named lane, while it streams
        self._access = access_record(websocket.scope)   # told each response's end and tokens

    async def serve(self) -> None:
        while True:
            message = await websocket.receive()
            frame: dict[str, Any] = {}
            try:
                frame = parse_frame(message)
                kind = frame["type"]
                if kind in ACKNOWLEDGEMENTS:
                    continue
                if kind == "response.steer":
                    await self._steer(frame)
                    continue
                if kind != "response.create":
                    raise InvalidRequest(
                        f"Unsupported frame type '{kind}': this server accepts "
                        "'response.create', 'response.steer' and 'response.processed'",
                        param="type", code="unsupported_event_type")
                stream_id = frame.get("stream_id")
                if stream_id is not None and (not isinstance(stream_id, str)
                                              or not _STREAM_ID.fullmatch(stream_id)):
                    raise InvalidRequest("stream_id must be 1 to 256 ASCII letters, digits, "
                                         "'_', '-' or '.'", param="stream_id",
                                         code="invalid_stream_id")
            except APIError as exc:
                if frame.get("type") == "response.create":
                    self._evict(frame)
                await self._send_error(exc, None)
                continue
            try:
                lane = self._lane(stream_id)
            except APIError as exc:
                self._evict(frame)
                await self._send_error(exc, stream_id)
                continue
            await lane.send(frame)  # a full lane holds the reader: backpressure

    def _lane(self, stream_id: str | None) -> trio.MemorySendChannel[dict[str, Any]]:
        """The lane a create runs on, started at its first create."""
        lane = self._lanes.get(stream_id)
        if lane is None:
            if len(self._lanes) - (None in self._lanes) >= MAX_NAMED_LANES:
                raise InvalidRequest(f"this socket already has {MAX_NAMED_LANES} stream_ids",
                                     param="stream_id", code="websocket_stream_limit_reached")
            lane, frames = trio.open_memory_channel[dict[str, Any]](LANE_QUEUE)
            self._lanes[stream_id] = lane
            self._nursery.start_soon(self._run_lane, stream_id, frames)
        return lane

    async def _run_lane(self, stream_id: str | None,
                        frames: trio.MemoryReceiveChannel[dict[str, Any]]) -> None:
        async for frame in frames:
            try:
                await self._respond(frame, stream_id)
            except APIError as exc:
                await self._send_error(exc, stream_id)
            except Exception:
                log.exception("unexpected error answering a response.create frame")
                await self._send_error(ServerError(
                    "The server had an error processing your request."), stream_id)

    async def _respond(self, frame: dict[str, Any], stream_id: str | None) -> None:
        """One create: refused with an error frame, or streamed to its end. A continuation
        refused (any error frame: 4xx or 5xx) evicts the response it continued first."""
        try:
            await self._create(frame, stream_id)
        except Exception:
            self._evict(frame)
            raise

    async def _create(self, frame: dict[str, Any], stream_id: str | None) -> None:
        body = {k: v for k, v in frame.items() if k not in ENVELOPE}
        if body.pop("background", None):
            raise InvalidRequest("background responses are not supported over a WebSocket; "
                                 "use POST /v1/responses", param="background")
        generate = frame.get("generate")
        if generate is None:
            generate = True
        elif not isinstance(generate, bool):
            raise InvalidRequest("Invalid type for 'generate': expected a boolean",
                                 param="generate")
        if _prewarm(body):
            generate = False   # the SDK: `prewarm: true` "overrides the `generate` field"
        req = structure({**body, "stream": True}, CreateResponse)
        if self._limits is not None:
            await self._limits.request(self._caller.tenant)
        if not generate:
            _, events = await self._turns.warm(self._caller, req, self._local)
            await self._send_events(events, stream_id)
            return
        started = await self._turns.create(self._caller, req, self._local)
        response_id = started.handle.response_id
        if stream_id is not None:
            self._streaming[response_id] = stream_id
        try:
            await self._follow(started.handle, stream_id, frame)
        finally:
            self._streaming.pop(response_id, None)
            await self._turns.abandon(self._caller, started.handle)   # gone: cancel

    def _evict(self, frame: dict[str, Any]) -> None:
        """A continuation failed: the response it continued leaves the socket's local
        responses, so continuing it again here is `previous_response_not_found` (Open
        Responses: "the server MUST evict the referenced previous_response_id from the
        connection-local cache"). Stored responses stay continuable from the store."""
        continued = frame.get("previous_response_id")
        if isinstance(continued, str):
            self._local.forget(continued)

    async def _follow(self, handle: SupervisorHandle, stream_id: str | None,
                      frame: dict[str, Any]) -> None:
        """The response's events as frames, coalesced like the SSE stream's writes; one that
        ends `failed` evicts what it continued before the client hears of it."""
        last = None
        async for batch in sse.coalesced(handle):
            last = batch[-1].type
            if last == "response.failed":
                self._evict(frame)
            await self._send_events(batch, stream_id)
        if last not in TERMINAL_EVENTS:
            # A cancelled response has no terminal event in the SSE stream (OpenAI's has
            # none); a socket client waits for one, so it gets an error frame instead.
            raise InvalidRequest(f"Response '{handle.response_id}' was cancelled.",
                                 code="response_cancelled")

    async def _send_events(self, events: Sequence[StreamEvent], stream_id: str | None) -> None:
        async with self._send_lock:
            for event in events:
                self._access.record_event(event)
                await websocket.send(dumps(event) if stream_id is None
                                     else dumps({**plain(event), "stream_id": stream_id}))

    async def _send_frame(self, frame: dict[str, Any], stream_id: str | None) -> None:
        """A frame that is no response's event (an error, a steer's answer)."""
        async with self._send_lock:
            await websocket.send(dumps(frame if stream_id is None
                                       else {**frame, "stream_id": stream_id}))

    async def _send_error(self, exc: APIError, stream_id: str | None) -> None:
        self._access.record_error()
        await self._send_frame(error_frame(exc), stream_id)

    async def _steer(self, frame: dict[str, Any]) -> None:
        """`response.steer`: steering is not built, so every well-formed one is answered
        `response.steer.failed` (code `steering_not_supported`) with its input returned, as
        openai's `ResponseSteerFailedEvent` defines it; the socket goes on. A malformed one
        is a 400 error frame. The answer carries the target's lane when it is a response
        this socket is streaming on a named lane."""
        for name in frame:
            if name not in STEER_FIELDS:
                raise InvalidRequest(f"Unknown parameter: '{name}'. A response.steer frame "
                                     "has only 'type', 'previous_response_id' and 'input'",
                                     param=name, code="unknown_parameter")
        target = frame.get("previous_response_id")
        if not isinstance(target, str) or not target:
            raise InvalidRequest("response.steer needs 'previous_response_id': the id of "
                                 "the response to steer", param="previous_response_id")
        steer_input = frame.get("input")
        if not (isinstance(steer_input, str) or (
                isinstance(steer_input, list) and steer_input
                and all(isinstance(item, dict) for item in steer_input))):
            raise InvalidRequest("response.steer needs 'input': a string or a non-empty "
                                 "array of input items", param="input")
        failed = {
            "type": "response.steer.failed", "sequence_number": 0,
            "steer": {"previous_response_id": target, "input": steer_input},
            "error": {"type": "invalid_request_error", "code": "steering_not_supported",
                      "message": "Steering is not supported by this server: send the input "
                                 "in a response.create with previous_response_id once the "
                                 "response has ended"}}
        await self._send_frame(failed, self._streaming.get(target))


def _prewarm(body: dict[str, Any]) -> bool:
    """Takes `prompt_cache_options.prewarm` out of a create body (the socket answers it: a
    warm-up) and says whether it asks for one; the rest of `prompt_cache_options` stays the
    body's. A `prewarm` that is not a boolean is a 400 naming it."""
    options = body.get("prompt_cache_options")
    if not isinstance(options, dict) or "prewarm" not in options:
        return False
    prewarm = options["prewarm"]
    if not isinstance(prewarm, bool):
        raise InvalidRequest("Invalid type for 'prompt_cache_options.prewarm': expected a "
                             "boolean", param="prompt_cache_options.prewarm")
    rest = {k: v for k, v in options.items() if k != "prewarm"}
    if rest:
        body["prompt_cache_options"] = rest
    else:
        del body["prompt_cache_options"]
    return prewarm


def error_frame(exc: APIError) -> dict[str, Any]:
    """OpenAI's WebSocket error: the HTTP error body, nested, with its status. Its
    `error.code` is never null (Open Responses: "WebSocket failures MUST be sent as a JSON
    `error` envelope with a `status` code and an `error.code`"): an error without a code of
    its own carries its type (`invalid_request_error`, `server_error`)."""
    body = exc.body()
    error = dict(body["error"])
    if error.get("code") is None:
        error["code"] = error["type"]
    return {"type": "error", **body, "error": error, "status": exc.status}


def parse_frame(message: str | bytes | None) -> dict[str, Any]:
    """A client frame as a JSON object with a string `type`, within the body limits; else the
    400 (413) that names what is wrong with it."""
    if isinstance(message, bytes):
        try:
            message = message.decode()
        except UnicodeDecodeError:
            raise InvalidRequest("a binary frame must hold UTF-8 JSON") from None
    if not message:
        raise InvalidRequest("the frame is empty; send a JSON object such as "
                             '{"type": "response.create", ...}')
    if len(message) > MAX_BODY_BYTES // 4 and len(message.encode()) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"the frame is larger than {MAX_BODY_BYTES} bytes")
    try:
        frame = json.loads(message)
    except RecursionError:
        raise InvalidRequest(f"the frame's JSON is nested more than {MAX_JSON_DEPTH} levels "
                             "deep") from None
    except ValueError as exc:
        raise InvalidRequest(f"the frame is not valid JSON ({exc})") from None
    if not isinstance(frame, dict):
        raise InvalidRequest("a frame must be a JSON object with a 'type', such as "
                             '{"type": "response.create", ...}')
    check_body(frame)
    if not isinstance(frame.get("type"), str):
        raise InvalidRequest("the frame has no 'type'; expected 'response.create'",
                             param="type")
    return frame
