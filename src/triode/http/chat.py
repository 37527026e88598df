"""`POST /v1/chat/completions`: OpenAI's Chat Completions, translated at the edge onto the
turn service (responses/chat.py), so it runs on the same model actor, prompt cache, tenants
and limits as `/v1/responses`. A stream is `chat.completion.chunk`s ending in `data:
[DONE]`; a client that goes away cancels its generation."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

from quart import Response, request

from ..errors import APIError, InvalidRequest
from ..responses.chat import ChatRequest, ChunkWriter, completion, to_create
from ..responses.objects import ResponseError, ResponseEvent, ResponseObject
from . import sse
from .access import access_record
from .body import json_body, json_response
from .caller import caller
from .contract import Operation, documented
from .routes import handles, route, sse_response, told

DONE = b"data: [DONE]\n\n"


@route("/chat/completions", methods=["POST"])
@documented(Operation("Create a chat completion (OpenAI's Chat Completions API)",
                      dict[str, Any], body=ChatRequest, stream=True, errors=(429, 503)))
async def create_chat_completion() -> Response:
    translated = to_create(await json_body())
    h, who = handles(), caller()
    try:
        started = await h.turns.create(who, translated.create)
    except InvalidRequest as exc:   # named as the Chat Completions field it came from
        raise translated.named(exc) from None
    handle = started.handle
    record = access_record(request.scope)
    record.record_response(handle.response_id)
    logprobs = translated.create.include is not None
    if not started.stream:
        try:
            obj: ResponseObject = await handle.wait()
        finally:
            await h.turns.abandon(who, handle)
        record.record_drafts(handle.accepted_drafts)
        told(obj)
        if obj.status == "failed":   # Chat Completions has no failed object: an error
            error = obj.error or ResponseError("server_error", "the response failed")
            raise APIError(error.message, code=error.code)
        return json_response(completion(obj, logprobs=logprobs))
    writer = ChunkWriter(include_usage=translated.include_usage, logprobs=logprobs)

    async def frames() -> AsyncIterator[bytes]:
        try:
            async for batch in sse.coalesced(handle):
                record.record_event(batch[-1])
                chunks = [c for event in batch for c in writer.feed(event)]
                out = b"".join(data(c) for c in chunks)
                for event in batch:
                    if isinstance(event, ResponseEvent) and event.type == "response.failed":
                        error = event.response.error   # the stream's error, as OpenAI's
                        out += data({"error": {
                            "message": error.message if error else "the response failed",
                            "type": "server_error", "param": None,
                            "code": error.code if error else None}})
                if out:
                    yield out
            record.record_drafts(handle.accepted_drafts)
            yield DONE
        finally:
            await h.turns.abandon(who, handle)

    return await sse_response(frames())


def data(value: Any) -> bytes:
    """One server-sent event of a chat stream: `data:` and the JSON, no event name."""
    return b"data: " + json.dumps(value, separators=(",", ":"),
                                  ensure_ascii=False).encode() + b"\n\n"
