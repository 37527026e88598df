"""The HTTP routes: parse, validate, call actor handles. Every route is also mounted without
the `/v1` prefix."""

from __future__ import annotations

import json
import logging
from typing import Any

import trio
from quart import Blueprint, Response, current_app, make_response, request

from ..actors.events import new_id
from ..actors.supervisor import Supervisor, SupervisorHandle
from ..errors import ContextLengthExceeded, InvalidRequest
from . import sse, translate
from .convert import structure
from .wire import CreateResponse

log = logging.getLogger(__name__)

api = Blueprint("api", __name__)
CANCEL_TIMEOUT = 5.0


def handles():
    return current_app.config["TRIODE_HANDLES"]


def route(path: str, **kwargs: Any):
    """Mounts a view at /v1/<path> and /<path>."""
    def deco(fn):
        api.add_url_rule(f"/v1{path}", view_func=fn, endpoint=f"v1{fn.__name__}", **kwargs)
        api.add_url_rule(path, view_func=fn, endpoint=fn.__name__, **kwargs)
        return fn
    return deco


async def json_body() -> Any:
    raw = await request.get_data()
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request ({exc}). The body must be "
            "valid JSON with Content-Type: application/json.") from None


def json_response(obj: Any, status: int = 200) -> Response:
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return Response(body, status=status, content_type="application/json")


@route("/responses", methods=["POST"])
async def create_response():
    h = handles()
    req = structure(await json_body(), CreateResponse)
    translate.check_model(req.model, h.model_names)
    plan = translate.plan(req, h.defaults)
    prompt = await h.model.render(plan.messages)
    context = h.model.info.context_length
    room = context - len(prompt)
    if room < 1:
        raise ContextLengthExceeded(
            f"the input is {len(prompt)} tokens; this model's context window is {context}",
            param="input")
    max_tokens = min(plan.max_output_tokens or room, room)
    response_id = new_id("resp")
    handle = await h.registry.start(lambda: Supervisor(
        response_id=response_id, prompt=prompt, max_tokens=max_tokens,
        sampling=plan.sampling, echo=plan.echo, model=h.model))
    if plan.stream:
        return await stream_response(handle)
    try:
        obj = await handle.wait()
    finally:
        await cancel_unless_done(handle)
    return json_response(obj)


async def cancel_unless_done(handle: SupervisorHandle) -> None:
    """A client that went away (disconnect, cancelled request) cancels its live response."""
    if not handle.done:
        with trio.move_on_after(CANCEL_TIMEOUT, shield=True):
            await handles().registry.cancel(handle.response_id)


async def stream_response(handle: SupervisorHandle, starting_after: int = -1) -> Response:
    registry = handles().registry

    async def frames():
        try:
            async for event in handle.follow(starting_after):
                yield sse.frame(event)
        finally:
            if not handle.done:
                with trio.move_on_after(CANCEL_TIMEOUT, shield=True):
                    await registry.cancel(handle.response_id)

    response = await make_response(frames(), 200, sse.HEADERS)
    response.timeout = None  # an SSE stream lasts as long as generation does
    return response


@route("/models", methods=["GET"])
async def list_models():
    h = handles()
    return json_response({"object": "list", "data": [
        {"id": h.model_names[0], "object": "model", "created": h.started_at,
         "owned_by": "triode"}]})


@route("/health", methods=["GET"])
async def health():
    h = handles()
    model = await h.model.statistics()
    registry = await h.registry.statistics()
    return json_response({
        "status": "ok" if model.engine_alive else "degraded",
        "model": h.model_names[0],
        "blas": h.blas,
        "engine_alive": model.engine_alive,
        "slots": {"total": model.slots_total, "busy": model.slots_busy,
                  "free": model.slots_total - model.slots_busy},
        "queue": {"depth": model.queue_depth, "max": model.queue_max},
        "generation": {"steps": model.steps, "tokens": model.tokens_generated,
                       "admitted": model.requests_admitted,
                       "rejected": model.requests_rejected},
        "responses": {"live": registry.live, "started": registry.started},
    })


@route("/metrics", methods=["GET"])
async def metrics():
    h = handles()
    model = await h.model.statistics()
    registry = await h.registry.statistics()
    rows = [
        ("triode_slots_total", "gauge", "generation slots", model.slots_total),
        ("triode_slots_busy", "gauge", "generation slots in use", model.slots_busy),
        ("triode_queue_depth", "gauge", "requests waiting for a slot", model.queue_depth),
        ("triode_engine_alive", "gauge", "1 while the engine thread runs", int(model.engine_alive)),
        ("triode_engine_steps_total", "counter", "engine steps with output", model.steps),
        ("triode_generated_tokens_total", "counter", "tokens generated", model.tokens_generated),
        ("triode_requests_admitted_total", "counter", "requests given a slot",
         model.requests_admitted),
        ("triode_requests_rejected_total", "counter", "requests refused with 503",
         model.requests_rejected),
        ("triode_responses_live", "gauge", "responses with a live supervisor", registry.live),
    ]
    lines = []
    for name, kind, help_, value in rows:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {value}"]
    return Response("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4")
