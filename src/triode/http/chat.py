"""`POST /v1/chat/completions`: OpenAI's Chat Completions, translated at the edge onto the
turn service (responses/chat.py), so it runs on the same model actor, prompt cache, tenants
and limits as `/v1/responses`. A stream is `chat.completion.chunk`s ending in `data:
[DONE]`; a client that goes away cancels its generation."""

from __future__ import annotations

from typing import Any

from quart import Response

from ..errors import InvalidRequest
from ..responses.chat import ChatRequest, ChunkWriter, completion, to_create
from ..responses.objects import StreamEvent
from .body import json_body, json_response
from .caller import caller
from .contract import Operation, documented
from .edge import DONE, data, failure, streamed, whole
from .routes import handles, route


@route("/chat/completions", methods=["POST"])
@documented(Operation("Create a chat completion (OpenAI's Chat Completions API)",
                      dict[str, Any], body=ChatRequest, stream=True, errors=(429, 503)))
async def create_chat_completion() -> Response:
    translated = to_create(await json_body())
    try:
        started = await handles().turns.create(caller(), translated.create)
    except InvalidRequest as exc:   # named as the Chat Completions field it came from
        raise translated.named(exc) from None
    logprobs = translated.create.include is not None
    if not started.stream:
        return json_response(completion(await whole(started), logprobs=logprobs))
    writer = ChunkWriter(include_usage=translated.include_usage, logprobs=logprobs)

    def frames_of(event: StreamEvent) -> bytes:
        return b"".join(data(c) for c in writer.feed(event)) + failure(event)

    return await streamed(started, frames_of, DONE)
