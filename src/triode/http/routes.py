"""The Responses routes: parse the request, call the turn service, render its answer. Every
route is also mounted without the `/v1` prefix (`route`)."""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Literal, Sequence, TypedDict, TypeVar

from quart import Blueprint, Response, current_app, make_response, request

from ..actors.supervisor import SupervisorHandle
from ..service.background import LiveResponse
from ..responses.conversations import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX, ItemPage, Paging, page
from ..responses.convert import structure
from ..responses.objects import CompactedHistory, ResponseObject, StreamEvent
from ..responses.wire import CompactRequest, CreateResponse, InputTokensRequest
from ..service.turns import Started
from ..system import Handles
from . import sse
from .access import access_record
from .body import json_body, json_response, query_int
from .caller import caller
from .contract import Operation, Param, View, documented

api = Blueprint("api", __name__)
REPLAY_EVENTS_PER_WRITE = 64


def handles() -> Handles:
    """The server's handles: its services take the request's `caller()` on every call."""
    handles: Handles = current_app.config["TRIODE_HANDLES"]
    return handles


Told = TypeVar("Told", ResponseObject, CompactedHistory)


def told(obj: Told) -> Told:
    """A response object, once the access log has been told its id and usage."""
    access_record(request.scope).record_object(obj)
    return obj


def route(path: str, **kwargs: Any) -> Callable[[View], View]:
    """Mounts a view at /v1<path> and <path>."""
    def deco(fn: View) -> View:
        api.add_url_rule(f"/v1{path}", view_func=fn, endpoint=f"v1{fn.__name__}", **kwargs)
        api.add_url_rule(path, view_func=fn, endpoint=fn.__name__, **kwargs)
        return fn
    return deco


# Names the hosted tool types a create dropped (`--hosted-tools ignore`), comma-separated.
DROPPED_TOOLS_HEADER = "X-Triode-Dropped-Tools"


# Statuses of every route that reads or writes a store (400: a store turned off; 503: a
# shared store that cannot be reached).
STORE_ERRORS = (400, 503)
# openai-python sends `include` on a retrieve and an input-items list (as `include[]`).
RETRIEVE_INCLUDE = tuple(
    Param(name, list[str], "accepted: stored items are returned whole")
    for name in ("include", "include[]"))
PAGING = (
    Param("after", str, "list the items after the one with this id"),
    Param("limit", int, "how many items to list", {"minimum": 1, "maximum": LIST_LIMIT_MAX,
                                                    "default": LIST_LIMIT_DEFAULT}),
    Param("order", Literal["asc", "desc"], "oldest first (asc) or newest first (desc)",
          {"default": "desc"}),
)


class ResponseDeleted(TypedDict):
    id: str
    object: Literal["response.deleted"]
    deleted: Literal[True]


class InputTokens(TypedDict):
    object: Literal["response.input_tokens"]
    input_tokens: int


@route("/responses", methods=["POST"])
@documented(Operation(
    "Create a response", ResponseObject, body=CreateResponse, stream=True,
    # 404: none; 429: too many background jobs (or their bytes); 503: the generation queue
    # is full, the server is shutting down, or a shared store cannot be reached.
    errors=(429, 503)))
async def create_response() -> Response:
    started = await handles().turns.create(caller(),
                                           structure(await json_body(), CreateResponse))
    response = await answer_for(started)
    if started.dropped_tools:
        response.headers[DROPPED_TOOLS_HEADER] = ",".join(started.dropped_tools)
    return response


async def answer_for(started: Started) -> Response:
    """A background job's queued object, the stream, or the finished object."""
    # Told at once, so the live page shows the request as the response's client meanwhile.
    access_record(request.scope).record_response(started.handle.response_id)
    if started.background:
        return json_response(told(started.handle.created()))
    if started.stream:
        return await stream_response(started.handle)
    try:
        obj = await started.handle.wait()
    finally:
        await handles().turns.abandon(caller(), started.handle)
    access_record(request.scope).record_drafts(started.handle.accepted_drafts)
    return json_response(told(obj))


@route("/responses/input_tokens", methods=["POST"])
@documented(Operation("Count a request's input tokens", InputTokens, body=InputTokensRequest,
                      defaulted=("model",), errors=(503,)))
async def count_input_tokens() -> Response:
    """The input's tokens exactly as `POST /v1/responses` would render them."""
    h = handles()
    body = await json_body()
    if isinstance(body, dict) and "model" not in body:
        body = {**body, "model": h.models.default.id}
    count = await h.turns.count_input_tokens(caller(), structure(body, InputTokensRequest))
    tokens: InputTokens = {"object": "response.input_tokens", "input_tokens": count}
    return json_response(tokens)


@route("/responses/compact", methods=["POST"])
@documented(Operation("Compact a history", CompactedHistory, body=CompactRequest,
                      errors=(503,)))
async def compact_history() -> Response:
    """Summarizes a full history into kept items plus one compaction item; stores nothing."""
    req = structure(await json_body(), CompactRequest)
    return json_response(told(await handles().turns.compact(caller(), req)))


@route("/responses/<response_id>", methods=["GET"])
@documented(Operation(
    "Retrieve a response (or poll a background one)", ResponseObject, stream=True,
    query=(Param("stream", bool, "replay the response's events (and follow a running one) "
                 "as server-sent events"),
           Param("starting_after", int, "with stream: the events after this sequence number",
                 {"minimum": -1, "default": -1}),
           *RETRIEVE_INCLUDE,
           Param("include_obfuscation", bool, "accepted; triode never adds obfuscation to "
                 "stream events")),
    errors=(*STORE_ERRORS, 404)))
async def get_response(response_id: str) -> Response:
    turns, who = handles().turns, caller()
    stream = request.args.get("stream", "false").lower() == "true"
    starting_after = query_int("starting_after", -1, lo=-1)
    live = await turns.live(who, response_id)
    if live is not None:
        if stream:
            return await stream_response(live, starting_after, cancel_on_disconnect=False)
        return json_response(told(live.polled()))
    if stream:
        events = await turns.stored_events(who, response_id, starting_after)
        access_record(request.scope).record_response(response_id)
        return await replay_response(events)
    return json_response(told((await turns.stored(who, response_id)).response))


@route("/responses/<response_id>", methods=["DELETE"])
@documented(Operation("Delete a stored response", ResponseDeleted,
                      errors=(*STORE_ERRORS, 404)))
async def delete_response(response_id: str) -> Response:
    await handles().turns.delete(caller(), response_id)
    access_record(request.scope).record_response(response_id)
    deleted: ResponseDeleted = {"id": response_id, "object": "response.deleted",
                                "deleted": True}
    return json_response(deleted)


@route("/responses/<response_id>/cancel", methods=["POST"])
@documented(Operation("Cancel a response", ResponseObject, errors=(*STORE_ERRORS, 404)))
async def cancel_response(response_id: str) -> Response:
    return json_response(told(await handles().turns.cancel(caller(), response_id)))


@route("/responses/<response_id>/input_items", methods=["GET"])
@documented(Operation("List a response's input items", ItemPage,
                      query=(*PAGING, *RETRIEVE_INCLUDE),
                      errors=(*STORE_ERRORS, 404)))
async def list_input_items(response_id: str) -> Response:
    args = request.args
    paging = Paging.parse(after=args.get("after"), limit=args.get("limit"),
                          order=args.get("order"))
    items = await handles().turns.input_items(caller(), response_id)
    return json_response(page(items, paging, owner="response"))


# ---- SSE ------------------------------------------------------------------------------------

async def stream_response(handle: LiveResponse, starting_after: int = -1, *,
                          cancel_on_disconnect: bool = True) -> Response:
    """Streams a live response's events; the creating stream's disconnect cancels it."""
    turns, who = handles().turns, caller()
    record = access_record(request.scope)
    record.record_response(handle.response_id)

    async def frames() -> AsyncIterator[bytes]:
        try:
            # One body chunk (one write) per batch (sse.coalesced).
            async for batch in sse.coalesced(handle, starting_after):
                record.record_event(batch[-1])   # a terminal event ends the stream
                yield sse.frames(batch)
            if cancel_on_disconnect and isinstance(handle, SupervisorHandle):
                record.record_drafts(handle.accepted_drafts)   # the stream that made it
        finally:
            if cancel_on_disconnect:
                await turns.abandon(who, handle)

    return await sse_response(frames())


async def replay_response(events: Sequence[StreamEvent]) -> Response:
    record = access_record(request.scope)

    async def frames() -> AsyncIterator[bytes]:
        for start in range(0, len(events), REPLAY_EVENTS_PER_WRITE):  # a few writes
            batch = events[start:start + REPLAY_EVENTS_PER_WRITE]
            record.record_event(batch[-1])
            yield sse.frames(batch)

    return await sse_response(frames())


async def sse_response(frames: AsyncIterator[bytes]) -> Response:
    response = await make_response(frames, 200, sse.HEADERS)
    assert isinstance(response, Response)
    response.timeout = None  # an SSE stream lasts as long as generation does
    return response
