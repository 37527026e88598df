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
(`generate: false`: a warm-up, nothing generated).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Sequence

import trio
from quart import websocket

from ..actors.supervisor import SupervisorHandle
from ..errors import APIError, InvalidRequest, PayloadTooLarge, ServerError
from ..responses.convert import structure
from ..responses.lifecycle import TERMINAL_EVENTS
from ..responses.objects import AnyEvent, dumps, event_type, plain
from ..responses.wire import CreateResponse
from ..service.turns import LocalResponses, Turns
from .access import access_record
from .body import MAX_BODY_BYTES, MAX_JSON_DEPTH, check_body
from .routes import STREAM_COALESCE_SECS, api, handles

log = logging.getLogger(__name__)

# Fields of a `response.create` frame that belong to the socket, not to the create body:
# `stream` is implicit (the Agents SDK and Codex send `true`), `stream_id` names the lane,
# `generate: false` asks for a warm-up.
ENVELOPE = frozenset({"type", "stream", "stream_id", "generate"})
# Frames a client sends that need no answer: Codex acknowledges each response it consumed.
ACKNOWLEDGEMENTS = frozenset({"response.processed"})

LANE_QUEUE = 4           # creates waiting on one lane; past it the socket stops reading
MAX_NAMED_LANES = 32     # distinct stream_ids per socket, as OpenAI's service allows
_STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")



async def responses_socket() -> None:
    """One Responses WebSocket; authenticated before this runs (the app's
    `before_websocket`)."""
    await websocket.accept()
    async with trio.open_nursery() as nursery:
        await Socket(handles().turns, nursery).serve()


for _path in ("/v1/responses", "/responses"):
    api.add_websocket(_path, endpoint=f"socket{_path.replace('/', '_')}",
                      view_func=responses_socket)


class Socket:
    """One socket: a reader that parses frames and hands creates to their lane, one task per
    lane that runs them in order, and one lock so frames leave whole and in order (with
    permessage-deflate, the compressor's order is the wire's order)."""

    def __init__(self, turns: Turns, nursery: trio.Nursery):
        self._turns = turns
        self._nursery = nursery
        self._lanes: dict[str | None, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._send_lock = trio.Lock()
        self._local = LocalResponses()
        self._access = access_record(websocket.scope)   # told each response's end and tokens

    async def serve(self) -> None:
        while True:
            message = await websocket.receive()
            try:
                frame = parse_frame(message)
                kind = frame["type"]
                if kind in ACKNOWLEDGEMENTS:
                    continue
                if kind != "response.create":
                    raise InvalidRequest(
                        f"Unsupported frame type '{kind}': this server accepts "
                        "'response.create' (and 'response.processed')", param="type",
                        code="unsupported_event_type")
                stream_id = frame.get("stream_id")
                if stream_id is not None and (not isinstance(stream_id, str)
                                              or not _STREAM_ID.fullmatch(stream_id)):
                    raise InvalidRequest("stream_id must be 1 to 256 ASCII letters, digits, "
                                         "'_', '-' or '.'", param="stream_id",
                                         code="invalid_stream_id")
            except APIError as exc:
                await self._send_error(exc, None)
                continue
            try:
                lane = self._lane(stream_id)
            except APIError as exc:
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
        """One create: refused with an error frame, or streamed to its end."""
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
        req = structure({**body, "stream": True}, CreateResponse)
        if not generate:
            _, events = await self._turns.warm(req, self._local)
            await self._send_events(events, stream_id)
            return
        started = await self._turns.create(req, self._local)
        try:
            await self._follow(started.handle, stream_id)
        finally:
            await self._turns.abandon(started.handle)   # the socket went away: cancel

    async def _follow(self, handle: SupervisorHandle, stream_id: str | None) -> None:
        """The response's events as frames, coalesced like the SSE stream's writes."""
        last = None
        async for batch in handle.follow_batches():
            await self._send_events(batch, stream_id)
            last = event_type(batch[-1])
            if last.endswith(".delta"):
                with trio.move_on_after(STREAM_COALESCE_SECS):
                    await handle.wait()  # the end is sent at once
        if last not in TERMINAL_EVENTS:
            # A cancelled response has no terminal event in the SSE stream (OpenAI's has
            # none); a socket client waits for one, so it gets an error frame instead.
            raise InvalidRequest(f"Response '{handle.response_id}' was cancelled.",
                                 code="response_cancelled")

    async def _send_events(self, events: Sequence[AnyEvent], stream_id: str | None) -> None:
        async with self._send_lock:
            for event in events:
                self._access.record_event(event)
                await websocket.send(dumps(event) if stream_id is None
                                     else dumps({**plain(event), "stream_id": stream_id}))

    async def _send_error(self, exc: APIError, stream_id: str | None) -> None:
        await self._send_events([error_frame(exc)], stream_id)


def error_frame(exc: APIError) -> dict[str, Any]:
    """OpenAI's WebSocket error: the HTTP error body, nested, with its status."""
    return {"type": "error", **exc.body(), "status": exc.status}


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
