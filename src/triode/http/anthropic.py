"""`POST /v1/messages` and `/v1/messages/count_tokens`: Anthropic's Messages API, translated
at the edge onto the turn service (responses/anthropic.py), on the same model actor, prompt
cache, tenants and limits as `/v1/responses`. Errors take Anthropic's shape; `x-api-key`
authenticates as `Authorization: Bearer` does (app.py); `anthropic-version` is accepted."""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable, Literal, TypedDict

from quart import Response

from ..errors import APIError, InvalidRequest
from ..responses.anthropic import EventWriter, MessagesRequest, error_body, message, to_create
from ..responses.objects import StreamEvent
from .body import json_body, json_response
from .caller import caller
from .contract import Operation, documented
from .edge import streamed, whole
from .routes import DROPPED_TOOLS_HEADER, handles, route

PATHS = ("/v1/messages", "/messages")


class TokenCount(TypedDict):
    input_tokens: int


class AnthropicErrorDetail(TypedDict):
    type: str
    message: str


class AnthropicError(TypedDict):
    """An error as Anthropic's API answers one."""

    type: Literal["error"]
    error: AnthropicErrorDetail


def is_anthropic(path: str) -> bool:
    """Whether a path is one of Anthropic's routes (its errors take Anthropic's shape)."""
    return any(path == p or path.startswith(p + "/") for p in PATHS)


def anthropic_error(status: int, message_: str, headers: dict[str, str] | None = None
                    ) -> Response:
    response = json_response(error_body(status, message_), status)
    response.headers.update(headers or {})
    return response


def anthropic_errors(view: Callable[[], Awaitable[Response]]
                     ) -> Callable[[], Awaitable[Response]]:
    """The view, with an APIError answered in Anthropic's shape."""
    async def wrapped() -> Response:
        try:
            return await view()
        except APIError as exc:
            where = f"{exc.param}: " if exc.param and not exc.message.startswith(exc.param) \
                else ""
            return anthropic_error(exc.status, where + exc.message, exc.headers())
    wrapped.__name__ = view.__name__
    wrapped.__doc__ = view.__doc__
    return wrapped


@route("/messages", methods=["POST"])
@documented(Operation("Create a message (Anthropic's Messages API)", dict[str, Any],
                      body=MessagesRequest, stream=True, errors=(429, 503),
                      error_body=AnthropicError))
@anthropic_errors
async def create_message() -> Response:
    translated = to_create(await json_body())
    try:
        started = await handles().turns.create(caller(), translated.create)
    except InvalidRequest as exc:   # named as the Messages field it came from
        raise translated.named(exc) from None
    dropped = ",".join((*started.dropped_tools, *translated.dropped_tools))
    handle = started.handle
    if not started.stream:
        obj = await whole(started)
        response = json_response(message(obj, handle.stop_sequence))
    else:
        writer = EventWriter()

        def frames_of(event: StreamEvent) -> bytes:
            return b"".join(
                f"event: {name}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n".encode()
                for name, body in writer.feed(event, handle.stop_sequence))

        response = await streamed(started, frames_of)
    if dropped:
        response.headers[DROPPED_TOOLS_HEADER] = dropped
    return response


@route("/messages/count_tokens", methods=["POST"])
@documented(Operation("Count a message's input tokens (Anthropic's Messages API)",
                      TokenCount, body=MessagesRequest, errors=(503,),
                      error_body=AnthropicError))
@anthropic_errors
async def count_message_tokens() -> Response:
    translated = to_create(await json_body(), counting=True)
    try:
        count = await handles().turns.count_input_tokens(caller(), translated.create)
    except InvalidRequest as exc:
        raise translated.named(exc) from None
    tokens: TokenCount = {"input_tokens": count}
    return json_response(tokens)
