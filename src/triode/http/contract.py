"""What each route reads and answers, declared on its view (`@documented`): the OpenAPI
document (openapi.py) is generated from these declarations, the wire types of the bodies
and the types of the answers, and fails to build if a mounted route has none."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping

import attrs

View = Callable[..., Awaitable[Any]]


@attrs.frozen
class Param:
    """A query parameter: its type is walked like a wire field's (`str`, `int`,
    `Literal[...]`, `list[X]` for a repeated one); `bounds` adds what the type cannot say."""

    name: str
    type: Any
    description: str
    bounds: Mapping[str, Any] = attrs.Factory(dict)


@attrs.frozen
class Operation:
    """One route's contract.

    `answer`: the 200 body's type. `body`: the request body's wire type, if it takes one
    (a body brings 400, 413 and 415); `defaulted`: the body's required fields that this
    route fills in itself when they are missing. `errors`: the statuses the route itself may answer
    with OpenAI's error object, beyond those (every route may answer 500, and 401 unless it
    is `public`). `answers`: other statuses with a body of their own, by status: (what it
    means, the body's type). `stream`: the 200 may be a `text/event-stream` instead.
    `media_type`: the 200's, when it is not JSON."""

    summary: str
    answer: Any
    body: type | None = None
    defaulted: tuple[str, ...] = ()
    query: tuple[Param, ...] = ()
    errors: tuple[int, ...] = ()
    answers: Mapping[int, tuple[str, Any]] = attrs.Factory(dict)
    stream: bool = False
    media_type: str = "application/json"
    public: bool = False        # answered without the API key (app.OPEN_PATHS)
    error_body: Any = None      # its errors' body type (None: OpenAI's error object)


OPERATIONS: dict[View, Operation] = {}


def documented(operation: Operation) -> Callable[[View], View]:
    """Declares the view's contract (see `Operation`)."""
    def deco(fn: View) -> View:
        OPERATIONS[fn] = operation
        return fn
    return deco
