"""`POST /v1/completions`: OpenAI's legacy Completions API (a plain prompt, no chat
template), translated at the edge onto the turn service (responses/completions.py). A
stream is `text_completion` chunks ending in `data: [DONE]`."""

from __future__ import annotations

from typing import Any

from quart import Response

from ..responses.completions import (CompletionChunks, CompletionRequest, text_completion,
                                     to_create)
from ..responses.objects import StreamEvent
from .body import json_body, json_response
from .caller import caller
from .contract import Operation, documented
from .edge import DONE, data, failure, streamed, whole
from .routes import handles, route


@route("/completions", methods=["POST"])
@documented(Operation("Create a completion of a plain prompt (OpenAI's Completions API)",
                      dict[str, Any], body=CompletionRequest, stream=True, errors=(429, 503)))
async def create_completion() -> Response:
    translated = to_create(await json_body())
    prompt = translated.create.raw_prompt
    prompt_text = prompt if isinstance(prompt, str) else ""
    started = await handles().turns.create(caller(), translated.create)
    if not started.stream:
        return json_response(text_completion(await whole(started), translated, prompt_text))
    chunks = CompletionChunks(translated, prompt_text)

    def frames_of(event: StreamEvent) -> bytes:
        return b"".join(data(c) for c in chunks.feed(event)) + failure(event)

    return await streamed(started, frames_of, DONE)
