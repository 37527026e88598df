"""What the other APIs' routes (Chat Completions, Completions, Anthropic Messages) share: a
started response answered whole, or streamed in the API's own frames. The client leaving
cancels the response, as on `/v1/responses`."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Callable

from quart import Response, request

from ..errors import APIError
from ..responses.objects import ResponseEvent, ResponseObject, StreamEvent
from ..service.turns import Started
from . import sse
from .access import access_record
from .caller import caller
from .routes import handles, sse_response, told

DONE = b"data: [DONE]\n\n"


def data(value: Any) -> bytes:
    """One server-sent event of an OpenAI-style stream: `data:` and the JSON, no name."""
    return b"data: " + json.dumps(value, separators=(",", ":"),
                                  ensure_ascii=False).encode() + b"\n\n"


def failure(event: StreamEvent) -> bytes:
    """A `response.failed` as the error chunk OpenAI's streams end with; nothing else."""
    if not (isinstance(event, ResponseEvent) and event.type == "response.failed"):
        return b""
    error = event.response.error
    return data({"error": {"message": error.message if error else "the response failed",
                           "type": "server_error", "param": None,
                           "code": error.code if error else None}})


async def whole(started: Started) -> ResponseObject:
    """The finished response; one that failed raises its error (these APIs have no failed
    object)."""
    h, who, handle = handles(), caller(), started.handle
    record = access_record(request.scope)
    record.record_response(handle.response_id)
    try:
        obj = await handle.wait()
    finally:
        await h.turns.abandon(who, handle)
    record.record_drafts(handle.accepted_drafts)
    told(obj)
    if obj.status == "failed":
        raise APIError(obj.error.message if obj.error else "the response failed",
                       code=obj.error.code if obj.error else None)
    return obj


async def streamed(started: Started, frames_of: Callable[[StreamEvent], bytes],
                   end: bytes = b"") -> Response:
    """The response's events as the API's frames (`frames_of` each event), then `end`."""
    h, who, handle = handles(), caller(), started.handle
    record = access_record(request.scope)
    record.record_response(handle.response_id)

    async def frames() -> AsyncIterator[bytes]:
        try:
            async for batch in sse.coalesced(handle):
                record.record_event(batch[-1])
                out = b"".join(frames_of(event) for event in batch)
                if out:
                    yield out
            record.record_drafts(handle.accepted_drafts)
            if end:
                yield end
        finally:
            await h.turns.abandon(who, handle)

    return await sse_response(frames())
