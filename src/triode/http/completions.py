"""`POST /v1/completions`: OpenAI's legacy Completions API (a plain prompt, no chat
template), translated at the edge onto the turn service (responses/completions.py). A
stream is `text_completion` chunks ending in `data: [DONE]`."""

from __future__ import annotations

from typing import Any, AsyncIterator

from quart import Response, request

from ..errors import APIError
from ..responses.completions import (CompletionChunks, CompletionRequest, text_completion,
                                     to_create)
from ..responses.objects import ResponseEvent, ResponseObject
from . import sse
from .access import access_record
from .body import json_body, json_response
from .chat import DONE, data
from .caller import caller
from .contract import Operation, documented
from .routes import handles, route, sse_response, told


@route("/completions", methods=["POST"])
@documented(Operation("Create a completion of a plain prompt (OpenAI's Completions API)",
                      dict[str, Any], body=CompletionRequest, stream=True, errors=(429, 503)))
async def create_completion() -> Response:
    translated = to_create(await json_body())
    prompt = translated.create.raw_prompt
    prompt_text = prompt if isinstance(prompt, str) else ""
    h, who = handles(), caller()
    started = await h.turns.create(who, translated.create)
    handle = started.handle
    record = access_record(request.scope)
    record.record_response(handle.response_id)
    if not started.stream:
        try:
            obj: ResponseObject = await handle.wait()
        finally:
            await h.turns.abandon(who, handle)
        record.record_drafts(handle.accepted_drafts)
        told(obj)
        if obj.status == "failed":
            raise APIError(obj.error.message if obj.error else "the response failed",
                           code=obj.error.code if obj.error else None)
        return json_response(text_completion(obj, translated, prompt_text))
    chunks = CompletionChunks(translated, prompt_text)

    async def frames() -> AsyncIterator[bytes]:
        try:
            async for batch in sse.coalesced(handle):
                record.record_event(batch[-1])
                out = b"".join(data(c) for event in batch for c in chunks.feed(event))
                for event in batch:
                    if isinstance(event, ResponseEvent) and event.type == "response.failed":
                        error = event.response.error
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
