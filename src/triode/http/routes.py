"""The HTTP routes: parse, validate, call actor handles. Every route is also mounted without
the `/v1` prefix."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from typing import Any

import attrs
import trio
from quart import Blueprint, Response, current_app, make_response, request

from ..actors.events import ResponseBuilder, new_id, usage
from ..actors.model import Rendered
from ..actors.output import OutputAssembler
from ..actors.store import StoreDisabled, StoredResponse
from ..actors.supervisor import Compacted, Prepared, Supervisor, SupervisorHandle
from ..errors import ContextLengthExceeded, InvalidRequest, NotFound, RateLimited
from ..model.parsers import make_parser
from . import compaction, compactor, history, sse, translate
from .convert import structure
from .items import chat_messages, turn_keys
from .wire import CompactRequest, CreateResponse

log = logging.getLogger(__name__)

api = Blueprint("api", __name__)
CANCEL_TIMEOUT = 5.0
STREAM_COALESCE_SECS = 0.01


def handles():
    return current_app.config["TRIODE_HANDLES"]


def route(path: str, **kwargs: Any):
    """Mounts a view at /v1/<path> and /<path>."""
    def deco(fn):
        api.add_url_rule(f"/v1{path}", view_func=fn, endpoint=f"v1{fn.__name__}", **kwargs)
        api.add_url_rule(path, view_func=fn, endpoint=fn.__name__, **kwargs)
        return fn
    return deco


# Nesting levels a request body may have (the body itself is level 1). Far more than any
# real request or JSON schema needs, and far below where parsing, structuring or a template
# would run out of stack.
MAX_JSON_DEPTH = 64


async def json_body() -> Any:
    raw = await request.get_data()
    try:
        body = json.loads(raw)
    except RecursionError:
        raise InvalidRequest(f"the JSON body is nested more than {MAX_JSON_DEPTH} levels "
                             "deep") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request ({exc}). The body must be "
            "valid JSON with Content-Type: application/json.") from None
    check_body(body)
    return body


_SURROGATE = re.compile("[\ud800-\udfff]")   # JSON can escape one alone; UTF-8 cannot hold it


def check_body(body: Any) -> None:
    """A 400 naming the top-level field whose value nests deeper than MAX_JSON_DEPTH or
    holds a string (or key) with an unpaired UTF-16 surrogate, which no later step could
    encode."""
    stack: list[tuple[Any, int, str | None]] = [(body, 1, None)]
    while stack:
        value, depth, field = stack.pop()
        if isinstance(value, str):
            if (bad := _SURROGATE.search(value)) is not None:
                raise InvalidRequest(
                    f"the JSON body has a string with an unpaired surrogate "
                    f"(\\u{ord(bad.group()):04x}), which is not valid Unicode", param=field)
            continue
        if isinstance(value, dict):   # keys are strings to check too
            children = [(x, k if field is None else field)
                        for k, v in value.items() for x in (k, v)]
        elif isinstance(value, list):
            children = [(v, field) for v in value]
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise InvalidRequest(f"the JSON body is nested more than {MAX_JSON_DEPTH} levels "
                                 "deep", param=field)
        stack += [(v, depth + 1, f) for v, f in children]


def json_response(obj: Any, status: int = 200) -> Response:
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return Response(body, status=status, content_type="application/json")


@route("/responses", methods=["POST"])
async def create_response():
    h = handles()
    req = structure(await json_body(), CreateResponse)
    if req.background and h.background_off is not None:
        translate.check_model(req.model, h.model_names)
        raise InvalidRequest(f"background mode is off: {h.background_off}", param="background")
    plan, rendered = await prepare(h, req)
    response_id = new_id("resp")
    background = bool(req.background)
    turn = {"plan": plan}   # what keep_turn records; compaction replaces the plan's messages

    async def compact_first() -> Prepared:
        turn["plan"], ready = await compacted(h, req, plan, rendered)
        return ready

    if not needs_compaction(h, plan, rendered):
        ready = finalize(h, req, plan, rendered)
    elif background:
        ready = compact_first  # the job compacts while queued: a refusal fails the job
    else:
        ready = await compact_first()  # a refusal is this request's HTTP error
    make = lambda: Supervisor(  # noqa: E731
        response_id=response_id, ready=ready, sampling=plan.sampling, echo=plan.echo,
        model=h.model, stop=plan.stop, top_logprobs=plan.top_logprobs, background=background,
        on_terminal=lambda obj, events: keep_turn(h, turn["plan"], obj, events))
    if background:
        return json_response(await start_job(h, response_id, plan, make))
    handle = await h.registry.start(make)
    if plan.stream:
        return await stream_response(handle)
    try:
        obj = await handle.wait()
    finally:
        await cancel_unless_done(h.registry, handle)
    return json_response(obj)


async def prepare(h, req: CreateResponse, *, submits: bool = True
                  ) -> tuple[translate.Plan, Rendered]:
    """Validates a create (or input_tokens) request and renders its input as generation
    would see it: history (chain or conversation, compaction items replayed), instructions,
    tools, restored reasoning. `submits=False`: only counting, no generation follows."""
    translate.check_model(req.model, h.model_names)
    translate.validate(req)
    past: list[dict[str, Any]] = []
    conversation = None
    if req.previous_response_id is not None:
        await check_finished(h, req.previous_response_id)
        past = await history.chain(h.responses, req.previous_response_id)
    elif req.conversation is not None:
        conversation = history.conversation_id(req.conversation)
        past = await h.conversations.get(conversation) or []
    plan = translate.plan(req, h.defaults, past, conversation, hosted_tools=h.hosted_tools)
    await restore_reasoning(h, plan.messages)
    rendered = await h.model.render(plan.messages, plan.template_tools, plan.template_kwargs,
                                    submits=submits)
    return plan, rendered


def needs_compaction(h, plan: translate.Plan, rendered: Rendered) -> bool:
    """context_management asks for compaction once the input reaches its threshold or
    leaves no room for output."""
    n = len(rendered.tokens)
    return plan.compact_threshold is not None and (
        n >= plan.compact_threshold or n >= h.model.info.context_length)


async def compacted(h, req: CreateResponse, plan: translate.Plan, rendered: Rendered
                    ) -> tuple[translate.Plan, Prepared]:
    """Compacts the plan's history before generation; the output will open with the
    compaction item."""
    result = await compactor.compact(h.model, plan, before=len(rendered.tokens))
    plan = attrs.evolve(plan, messages=result.messages)
    done = Compacted(result.item, result.before, result.after)
    return plan, finalize(h, req, plan, result.rendered, done)


def finalize(h, req: CreateResponse, plan: translate.Plan, rendered: Rendered,
             compaction_done: Compacted | None = None) -> Prepared:
    """The rendered prompt's generation limits, grammar and output assembly."""
    info = h.model.info
    prompt = rendered.tokens
    context = info.context_length
    room = context - len(prompt)
    if room < 1:
        raise ContextLengthExceeded(
            f"the input is {len(prompt)} tokens; this model's context window is {context}",
            param="input")
    thinking = translate.starts_in_reasoning(info, rendered.text)
    return Prepared(prompt=prompt, max_tokens=min(plan.max_output_tokens or room, room),
                    grammar=translate.grammar_for(req, plan, in_reasoning=thinking),
                    assemble=assembler_for(plan, info, thinking), compaction=compaction_done)


@route("/responses/input_tokens", methods=["POST"])
async def count_input_tokens():
    """The input's tokens exactly as `POST /v1/responses` would render them."""
    h = handles()
    body = await json_body()
    if isinstance(body, dict) and "model" not in body:
        body = {**body, "model": h.model_names[0]}
    _, rendered = await prepare(h, structure(body, CreateResponse), submits=False)
    return json_response({"object": "response.input_tokens",
                          "input_tokens": len(rendered.tokens)})


@route("/responses/compact", methods=["POST"])
async def compact_history():
    """Summarizes a full history (in `input`) into kept items plus one compaction item;
    stores nothing."""
    h = handles()
    req = structure(await json_body(), CompactRequest)
    translate.check_model(req.model, h.model_names)
    for param in ("stream", "previous_response_id", "conversation"):
        if getattr(req, param) not in (None, False):
            raise InvalidRequest(f"'{param}' is not accepted by /v1/responses/compact; send "
                                 "the full history in 'input'", param=param)
    context = h.model.info.context_length
    keep_tokens = req.keep_tokens
    if keep_tokens is not None and keep_tokens < 1:
        raise InvalidRequest("keep_tokens must be greater than 0", param="keep_tokens")
    max_tokens = compaction.SUMMARY_MAX_TOKENS if req.max_output_tokens is None \
        else req.max_output_tokens
    if not 1 <= max_tokens <= compaction.SUMMARY_MAX_TOKENS_LIMIT:
        raise InvalidRequest("max_output_tokens must be from 1 to "
                             f"{compaction.SUMMARY_MAX_TOKENS_LIMIT}", param="max_output_tokens")
    as_create = CreateResponse(
        model=req.model, input=req.input, instructions=req.instructions, tools=req.tools,
        tool_choice=req.tool_choice, parallel_tool_calls=req.parallel_tool_calls,
        metadata=req.metadata, chat_template_kwargs=req.chat_template_kwargs)
    plan, rendered = await prepare(h, as_create, submits=False)
    if len(rendered.tokens) > context:
        raise ContextLengthExceeded(
            f"the history is {len(rendered.tokens)} tokens, longer than one context window "
            f"({context}); compact it in parts", param="input")
    result = await compactor.compact(h.model, plan, before=len(rendered.tokens),
                                     keep_tokens=keep_tokens, max_output_tokens=max_tokens,
                                     submits=False)
    return json_response({
        "id": new_id("resp"), "object": "response.compaction",
        "created_at": int(time.time()), "model": req.model,
        "output": [*result.system, *result.kept, result.item], "usage": result.usage})


async def check_finished(h, response_id: str) -> None:
    """A response still running cannot be continued yet."""
    live = await h.registry.lookup(response_id)
    if live is not None and not live.done:
        raise InvalidRequest(
            f"previous response '{response_id}' has not finished (status: {live.status})",
            param="previous_response_id")


async def start_job(h, response_id: str, plan: translate.Plan, make) -> dict[str, Any]:
    """Accepts a background job: its approximate bytes are pinned in the response store
    (429 when the active jobs would pass the byte budget), the registry counts it (429 at
    max-jobs) and the model actor queues it (503 when full). Returns the queued object."""
    builder = ResponseBuilder(response_id, plan.echo, background=True)
    builder.created()
    queued = builder.obj
    # Room for the most the job's end can need: if its final object does not fit the
    # budget, the `failed` one keep_job stores instead must (usage at its widest).
    widest = {**queued, "usage": usage(*(USAGE_BOUND,) * 4)}
    fallback = StoredResponse.of(*too_large(widest, plan, builder.events[0]))
    if not await h.responses.put(response_id, history.record(queued, plan.items), pinned=True,
                                 reserve=fallback.size):
        raise RateLimited("the active background responses would exceed "
                          "--responses-store-max-bytes; retry after one finishes")
    try:
        handle = await h.registry.start(make, background=True)
    except BaseException:
        with trio.move_on_after(CANCEL_TIMEOUT, shield=True):
            await h.responses.delete(response_id)
        raise
    return handle.created()


def assembler_for(plan: translate.Plan, info, thinking: bool):
    """How this response's decoded text becomes output items (parser + declared tools)."""
    declared = {t.chat_name: (t.kind, t.name, t.namespace) for t in plan.tools}

    def assemble(builder):
        parser = make_parser(info.tool_format, reasoning=info.reasoning,
                             starts_in_reasoning=thinking)
        return OutputAssembler(builder, parser, resolve=declared.get,
                               allow_calls=plan.choice.mode != "none",
                               parallel=plan.echo["parallel_tool_calls"],
                               encrypted_reasoning=plan.encrypted_reasoning,
                               starts_in_reasoning=thinking)

    return assemble


async def restore_reasoning(h, messages: list[dict[str, Any]]) -> None:
    """Assistant turns sent back without their reasoning get the reasoning triode generated
    for them, so the prompt renders as it was generated (the reasoning echo)."""
    bare = [(m, key) for m, key in zip(messages, turn_keys(messages))
            if key is not None and "reasoning_content" not in m]
    for (message, _), text in zip(bare, await h.echo.recall(key for _, key in bare)):
        if text is not None:
            message["reasoning_content"] = text


async def keep_turn(h, plan: translate.Plan, obj: dict[str, Any], events: list[dict]) -> None:
    """At a response's end: store it (store: true, or any background job, whose final
    object replaces its pinned entry); then, if it finished, extend its conversation, if
    any, and remember the reasoning of the turn it returned."""
    if obj.get("background"):
        obj = await keep_job(h, plan, obj, events)
    elif plan.store:
        with contextlib.suppress(StoreDisabled):
            await h.responses.put(obj["id"], history.record(obj, plan.items), events)
    if obj["status"] not in ("completed", "incomplete"):
        return  # a failed or cancelled turn adds nothing
    turn = [*plan.messages, *chat_messages(None, obj["output"])]
    await h.echo.remember((key, m["reasoning_content"])
                          for m, key in zip(turn, turn_keys(turn))
                          if key is not None and m.get("reasoning_content"))
    if plan.conversation is not None:
        with contextlib.suppress(StoreDisabled):
            await h.conversations.append(plan.conversation, [*plan.items, *obj["output"]])


async def keep_job(h, plan: translate.Plan, obj: dict[str, Any], events: list[dict]
                   ) -> dict[str, Any]:
    """A finished job's final object becomes a stored response (store: false: readable for
    the ephemeral TTL only), replacing its pinned entry. One too big for the byte budget is
    replaced by a `failed` response with empty output, so polling still gets an answer; the
    pinned entry reserved room for that one (start_job), so it is always kept.
    Returns the object as kept."""
    ephemeral = not plan.store
    record = history.record(obj, plan.items, ephemeral=ephemeral)
    if await h.responses.put(obj["id"], record, events, ephemeral=ephemeral):
        return obj
    record, kept_events = too_large(obj, plan, events[0])
    await h.responses.put(obj["id"], record, kept_events, ephemeral=ephemeral)
    return record["response"]


USAGE_BOUND = 10 ** 15 - 1   # more tokens than any count in a usage object will reach


def too_large(obj: dict[str, Any], plan: translate.Plan, created: dict[str, Any]
              ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What is stored for a finished job whose final object the byte budget cannot hold:
    the object as `failed`, without output, and its events (the created one, then
    response.failed)."""
    failed = {**obj, "status": "failed", "output": [], "incomplete_details": None,
              "error": {"code": "server_error",
                        "message": "the response is larger than --responses-store-max-bytes "
                                   "and could not be kept"}}
    closing = {"type": "response.failed", "sequence_number": 1, "response": failed}
    return history.record(failed, plan.items, ephemeral=not plan.store), [created, closing]


async def stored(response_id: str) -> dict[str, Any]:
    rec = await handles().responses.get(response_id)
    if rec is None:
        raise NotFound(f"No response found with id '{response_id}'.", param="response_id")
    return rec


@route("/responses/<response_id>", methods=["GET"])
async def get_response(response_id: str):
    h = handles()
    live = await h.registry.lookup(response_id)
    stream = request.args.get("stream", "false").lower() == "true"
    starting_after = query_int("starting_after", -1, lo=-1)
    if live is not None and (live.background or live.snapshot.get("store")) and not live.done:
        if stream:
            return await stream_response(live, starting_after, cancel_on_disconnect=False)
        return json_response(live.polled())
    rec = await stored(response_id)
    if stream:
        events = await h.responses.get_events(response_id) or []
        return await replay_response([e for e in events if e["sequence_number"] > starting_after])
    return json_response(rec["response"])


@route("/responses/<response_id>", methods=["DELETE"])
async def delete_response(response_id: str):
    h = handles()
    h.responses.check_enabled()
    live = await h.registry.lookup(response_id)
    if live is not None and live.background and not live.done:
        raise InvalidRequest(f"background response '{response_id}' has not finished "
                             f"(status: {live.status}); cancel it before deleting it",
                             param="response_id")
    if not await h.responses.delete(response_id):
        raise NotFound(f"No response found with id '{response_id}'.", param="response_id")
    return json_response({"id": response_id, "object": "response.deleted", "deleted": True})


@route("/responses/<response_id>/cancel", methods=["POST"])
async def cancel_response(response_id: str):
    h = handles()
    h.responses.check_enabled()
    live = await h.registry.cancel(response_id)
    if live is not None:
        obj = await live.wait()
        if obj.get("store") or live.background:   # what a GET now returns (see keep_job)
            return json_response((await stored(response_id))["response"])
        return json_response(obj)
    return json_response((await stored(response_id))["response"])


@route("/responses/<response_id>/input_items", methods=["GET"])
async def list_input_items(response_id: str):
    items = (await stored(response_id))["input"]
    limit = query_int("limit", 20, lo=1, hi=100)
    order = request.args.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("Invalid value for 'order': expected 'asc' or 'desc'", param="order")
    ordered = items if order == "asc" else items[::-1]
    after = request.args.get("after")
    if after is not None:
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise InvalidRequest(f"No input item with id '{after}' in this response.",
                                 param="after")
        ordered = ordered[ids.index(after) + 1:]
    page = ordered[:limit]
    return json_response({
        "object": "list", "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(ordered) > limit,
    })


def query_int(name: str, default: int, *, lo: int, hi: int | None = None) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(f"Invalid value for '{name}': expected an integer",
                             param=name) from None
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise InvalidRequest(f"Invalid value for '{name}': must be {bound}", param=name)
    return value


async def cancel_unless_done(registry, handle: SupervisorHandle) -> None:
    """A client that went away (disconnect, cancelled request) cancels its live response."""
    if not handle.done:
        with trio.move_on_after(CANCEL_TIMEOUT, shield=True):
            await registry.cancel(handle.response_id)


async def stream_response(handle: SupervisorHandle, starting_after: int = -1, *,
                          cancel_on_disconnect: bool = True) -> Response:
    """Streams a live response's events; the creating stream's disconnect cancels it."""
    registry = handles().registry

    async def frames():
        try:
            # One body chunk (one write) per wake-up, however many events it brought; while
            # tokens stream, a wake-up comes at most every STREAM_COALESCE_SECS (or at the
            # end), so under load a write carries several steps' deltas instead of one send
            # per step each.
            async for batch in handle.follow_batches(starting_after):
                yield sse.frames(batch)
                if batch[-1]["type"].endswith(".delta"):
                    with trio.move_on_after(STREAM_COALESCE_SECS):
                        await handle.wait()  # the end is written at once
        finally:
            if cancel_on_disconnect:
                await cancel_unless_done(registry, handle)

    return await sse_response(frames())


async def replay_response(events: list[dict[str, Any]]) -> Response:
    async def frames():
        for start in range(0, len(events), 64):  # a few writes, not one per event
            yield sse.frames(events[start:start + 64])

    return await sse_response(frames())


async def sse_response(frames) -> Response:
    response = await make_response(frames, 200, sse.HEADERS)
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
    stores = {name: attrs.asdict(await store.statistics())
              for name, store in (("responses", h.responses), ("conversations", h.conversations),
                                  ("reasoning_echo", h.echo))}
    return json_response({
        "status": "ok" if model.engine_alive else "degraded",
        "model": h.model_names[0],
        "blas": h.blas,
        "blas_threads": h.model.info.blas_threads,
        "engine_alive": model.engine_alive,
        "engine_restarts": model.engine_restarts,
        "engine_error": model.engine_error,
        "slots": {"total": model.slots_total, "busy": model.slots_busy,
                  "free": model.slots_total - model.slots_busy},
        "queue": {"depth": model.queue_depth, "max": model.queue_max},
        "generation": {"steps": model.steps, "tokens": model.tokens_generated,
                       "admitted": model.requests_admitted,
                       "rejected": model.requests_rejected, "rendering": model.rendering},
        "prompt_cache": attrs.asdict(model.prompt_cache),
        "responses": {"live": registry.live, "started": registry.started,
                      "background_jobs": registry.background_jobs,
                      "background_max_jobs": registry.background_max_jobs},
        "tasks": count_tasks(),
        "stores": stores,
    })


def count_tasks() -> int:
    """How many trio tasks the process runs now (the soak test checks none are left behind)."""
    count, todo = 0, [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        count += 1
        todo += [child for nursery in task.child_nurseries for child in nursery.child_tasks]
    return count


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
        ("triode_engine_restarts_total", "counter", "fresh engines started after a failure",
         model.engine_restarts),
        ("triode_engine_steps_total", "counter", "engine steps with output", model.steps),
        ("triode_generated_tokens_total", "counter", "tokens generated", model.tokens_generated),
        ("triode_requests_admitted_total", "counter", "requests given a slot",
         model.requests_admitted),
        ("triode_requests_rejected_total", "counter", "requests refused with 503",
         model.requests_rejected),
        ("triode_responses_live", "gauge", "responses with a live supervisor", registry.live),
        ("triode_background_jobs", "gauge", "active background responses",
         registry.background_jobs),
    ]
    for name, store in (("responses", h.responses), ("conversations", h.conversations)):
        st = await store.statistics()
        rows += [
            (f"triode_{name}_store_entries", "gauge", f"entries in the {name} store", st.entries),
            (f"triode_{name}_store_bytes", "gauge", f"retained JSON bytes in the {name} store",
             st.bytes),
        ]
        rows += [(f"triode_{name}_store_evictions_{cause}_total", "counter",
                  f"{name} store evictions by {cause}", count)
                 for cause, count in attrs.asdict(st.evictions).items()]
    lines = []
    for name, kind, help_, value in rows:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {value}"]
    return Response("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4")
