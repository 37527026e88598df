"""The turn service: a response's create / continue / keep policy, in one typed object.

Routes call its named methods and render what they return; it talks to the actors through
their handles and builds everything else with the pure `responses` layer:

- `create`: validate, restore the history (a `previous_response_id` chain or a
  conversation), render, compact if asked, then start a supervisor (a background job is
  first pinned in the response store, at the size of the record its end may need);
- `prepare` (shared with `count_input_tokens` and `compact`, so all three count the same
  tokens);
- `keep`: the supervisor hands it every response's end before anyone is told of it: the
  store write, the conversation append and the reasoning echo;
- reads (`live`, `stored`, `stored_events`, `input_items`), `cancel`, `delete`, `abandon`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections import OrderedDict
from typing import Any, Callable

import attrs
import trio

from ..actors.jobs import JobBoardHandle
from ..actors.model import ModelHandle
from ..actors.registry import RegistryHandle
from ..actors.store import (ConversationStoreHandle, ReasoningEchoHandle, ResponseStoreHandle,
                            StoredResponse)
from ..actors.supervisor import Keeper, PrepareLater, Supervisor, SupervisorHandle
from ..errors import (ContextLengthExceeded, InvalidRequest, NotFound, RateLimited,
                      StoreDisabled, StoreUnavailable)
from ..model.request import Rendered
from ..responses import compaction, history, translate
from ..responses.builder import ResponseBuilder
from ..responses.ids import new_id, usage
from ..responses.items import chat_messages, turn_keys
from ..responses.lifecycle import Status
from ..responses.prepared import Compacted, Prepared, finalize
from ..responses.translate import Plan
from ..responses.convert import structure
from ..responses.wire import (CompactRequest, CreateResponse, InputItem, ItemList,
                              ItemReference)
from . import compactor
from .remote import ORPHANED, TERMINAL_STATUSES, LiveResponse, RemoteJob

log = logging.getLogger(__name__)

CANCEL_TIMEOUT = 5.0
# A response finished while its shared store is down: how long `keep` retries (the
# supervisor gives it at most TERMINAL_HOOK_TIMEOUT, 5 s).
KEEP_RETRY_SECS = 4.0
KEEP_RETRY_INTERVAL = 0.5
LOCAL_RESPONSES = 64   # responses one connection remembers (LRU) for previous_response_id


@attrs.frozen
class Started:
    """A response the create call started: its live handle and how to answer for it."""

    handle: SupervisorHandle
    stream: bool
    background: bool                 # answer with the queued object (handle.created())
    dropped_tools: tuple[str, ...]   # hosted tool types the request listed and lost


class Turns:
    def __init__(self, *, model: ModelHandle, registry: RegistryHandle,
                 responses: ResponseStoreHandle, conversations: ConversationStoreHandle,
                 echo: ReasoningEchoHandle, model_names: tuple[str, ...],
                 hosted_tools: str = "ignore", background_off: str | None = None,
                 board: JobBoardHandle | None = None):
        """`background_off`: why background mode is off (one of its budgets is 0), if so.
        `board`: the job board of a shared store (background jobs across processes)."""
        self._model = model
        self._registry = registry
        self._responses = responses
        self._conversations = conversations
        self._echo = echo
        self.model_names = model_names
        self._hosted_tools = hosted_tools
        self._background_off = background_off
        self._board = board

    # ---- create ------------------------------------------------------------------------

    async def create(self, req: CreateResponse, local: LocalResponses | None = None
                     ) -> Started:
        """Starts a response (a background job: accepts it). `local`: the connection's own
        responses (a WebSocket's), which `previous_response_id` may name and which a
        `store: false` response made here joins."""
        if req.background and self._background_off is not None:
            translate.check_model(req.model, self.model_names)
            raise InvalidRequest(f"background mode is off: {self._background_off}",
                                 param="background")
        plan, rendered = await self.prepare(req, local=local)
        if plan.store or req.background:   # a shared store that is down: 503 before any work
            await self._responses.ping()
        if plan.conversation is not None:
            await self._conversations.ping()
        if plan.dropped_tools:
            log.warning("dropped hosted tools this server cannot run: %s",
                        ", ".join(plan.dropped_tools))
        response_id = new_id("resp")
        background = bool(req.background)
        ready: Prepared | PrepareLater
        if not self._needs_compaction(plan, rendered):
            ready = finalize(req, plan, rendered, self._model.info)
        elif background:
            # The job compacts while queued: a refusal fails the job, not this call.
            ready = functools.partial(self._compacted, req, plan, rendered)
        else:
            ready = await self._compacted(req, plan, rendered)  # a refusal is this call's 400

        keeper: Keeper = self if local is None else _LocalKeeper(self, local)

        def make() -> Supervisor:
            return Supervisor(response_id=response_id, plan=plan, ready=ready,
                              model=self._model, background=background, keeper=keeper)

        if background:
            handle = await self._start_job(response_id, plan, make)
        else:
            handle = await self._registry.start(make)
        return Started(handle, plan.stream, background, plan.dropped_tools)

    async def warm(self, req: CreateResponse, local: LocalResponses
                   ) -> tuple[str, list[dict[str, Any]]]:
        """A warm-up (`generate: false` over a WebSocket): the request validated and rendered
        as `create` would, answered with a completed response without output (usage counts
        its input) that a later create on the same connection may name as
        `previous_response_id`. Nothing is generated or stored. Returns (id, events)."""
        plan, rendered = await self.prepare(req, submits=False, local=local)
        builder = ResponseBuilder(new_id("resp"), plan.echo)
        builder.created()
        builder.in_progress()
        builder.finish(Status.COMPLETED, usage(len(rendered.tokens)))
        local.remember(builder.obj["id"], [*plan.past, *plan.items])
        return builder.obj["id"], builder.events

    async def prepare(self, req: CreateResponse, *, submits: bool = True,
                      local: LocalResponses | None = None) -> tuple[Plan, Rendered]:
        """Validates a create (or input_tokens, or compact) request and renders its input as
        generation would see it: history (chain or conversation, compaction items
        replayed), instructions, tools, restored reasoning. `submits=False`: only
        counting, no generation follows. A `previous_response_id` is looked up among
        `local`'s responses first, then in the store."""
        translate.check_model(req.model, self.model_names)
        translate.validate(req)
        past: list[dict[str, Any]] = []
        conversation = None
        remembered = None
        if req.previous_response_id is not None and local is not None:
            remembered = local.history(req.previous_response_id)
        if remembered is not None:
            past = remembered
        elif req.previous_response_id is not None:
            await self._check_finished(req.previous_response_id)
            past = await history.chain(self._responses, req.previous_response_id)
        elif req.conversation is not None:
            conversation = history.conversation_id(req.conversation)
            past = await self._conversations.get(conversation) or []
        req = await self._resolve_references(req, past)
        plan = translate.plan(req, self._model.info.sampling_defaults, past, conversation,
                              hosted_tools=self._hosted_tools)
        await self._restore_reasoning(plan.messages)
        rendered = await self._model.render(plan.messages, plan.template_tools,
                                            plan.template_kwargs, submits=submits)
        if plan.echo["truncation"] == "auto" and \
                len(rendered.tokens) >= self._model.info.context_length:
            plan, rendered = await self._truncated(plan, submits=submits)
        return plan, rendered

    async def _truncated(self, plan: Plan, *, submits: bool) -> tuple[Plan, Rendered]:
        """`truncation: auto`, as OpenAI defines it: the input is over the context window,
        so its oldest turns are dropped (at split points: a tool call never loses its
        output; system/developer messages and the last user message stay), as few as leave
        room for `max_output_tokens` (at most half the window; 1 token without it); found
        by bisection over the split points. Nothing can help: the 400
        `context_length_exceeded` a disabled truncation gives."""
        context = self._model.info.context_length
        limit = context - min(plan.max_output_tokens or 1, context // 2)
        candidates = compaction.truncations(plan.history)

        async def attempt(items: list[dict[str, Any]]) -> tuple[Plan, Rendered]:
            messages = chat_messages(plan.echo["instructions"], items)
            await self._restore_reasoning(messages)
            rendered = await self._model.render(messages, plan.template_tools,
                                                plan.template_kwargs, submits=False)
            return attrs.evolve(plan, messages=messages, history=items), rendered

        lo, hi = 0, len(candidates) - 1   # candidates[hi] drops the most
        best = await attempt(candidates[hi])
        if len(best[1].tokens) > limit:
            raise ContextLengthExceeded(
                f"the input is {len(best[1].tokens)} tokens even with every earlier turn "
                f"dropped; this model's context window is {context}", param="input")
        while lo < hi:
            mid = (lo + hi) // 2
            tried = await attempt(candidates[mid])
            if len(tried[1].tokens) <= limit:
                best, hi = tried, mid
            else:
                lo = mid + 1
        if submits:   # rendered for counting above; the one that is submitted says so
            best = (best[0], await self._model.render(best[0].messages, plan.template_tools,
                                                      plan.template_kwargs, submits=True))
        return best

    async def _resolve_references(self, req: CreateResponse, past: list[dict[str, Any]]
                                  ) -> CreateResponse:
        """Every `item_reference` in the input, replaced by the item it names: one of the
        history's (the chain or conversation), else any stored response's input or output
        item (not a `store: false` one's). An unknown id is a 400 naming it."""
        if isinstance(req.input, str) or not any(
                isinstance(item, ItemReference) for item in req.input):
            return req
        known = {item["id"]: item for item in past if isinstance(item.get("id"), str)}
        resolved: list[InputItem] = []
        for i, item in enumerate(req.input):
            if isinstance(item, ItemReference):
                found = known.get(item.id)
                if found is None:
                    with contextlib.suppress(StoreDisabled):
                        found = await self._responses.find_item(item.id)
                if found is None:
                    raise InvalidRequest(f"Item with id '{item.id}' not found.",
                                         param=f"input[{i}].id")
                item = structure({"input": [found]}, ItemList).input[0]
            resolved.append(item)
        return attrs.evolve(req, input=resolved)

    def _needs_compaction(self, plan: Plan, rendered: Rendered) -> bool:
        """context_management asks for compaction once the input reaches its threshold or
        leaves no room for output."""
        n = len(rendered.tokens)
        return plan.compact_threshold is not None and (
            n >= plan.compact_threshold or n >= self._model.info.context_length)

    async def _compacted(self, req: CreateResponse, plan: Plan, rendered: Rendered
                         ) -> Prepared:
        """Compacts the plan's history before generation; the output will open with the
        compaction item, and the kept turn is the compacted one."""
        result = await compactor.compact(self._model, compactor.Transcript.of(plan),
                                         before=len(rendered.tokens))
        compacted = attrs.evolve(plan, messages=result.messages)
        done = Compacted(result.item, result.before, result.after)
        return finalize(req, compacted, result.rendered, self._model.info, done)

    async def _check_finished(self, response_id: str) -> None:
        """A response still running cannot be continued yet."""
        live: LiveResponse | None = await self._registry.lookup(response_id)
        if live is None or live.done:
            live = await self._remote(response_id)
        if live is not None and not live.done:
            raise InvalidRequest(f"previous response '{response_id}' has not finished "
                                 f"(status: {live.polled()['status']})",
                                 param="previous_response_id")

    async def _restore_reasoning(self, messages: list[dict[str, Any]]) -> None:
        """Assistant turns sent back without their reasoning get the reasoning triode
        generated for them, so the prompt renders as it was generated (the reasoning echo)."""
        bare = [(m, key) for m, key in zip(messages, turn_keys(messages))
                if key is not None and "reasoning_content" not in m]
        for (message, _), text in zip(bare, await self._echo.recall(key for _, key in bare)):
            if text is not None:
                message["reasoning_content"] = text

    async def _start_job(self, response_id: str, plan: Plan, make: Callable[[], Supervisor]
                         ) -> SupervisorHandle:
        """Accepts a background job: its approximate bytes are pinned in the response store
        (429 when the active jobs would pass the byte budget), the registry counts it (429 at
        max-jobs) and the model actor queues it (503 when full)."""
        builder = ResponseBuilder(response_id, plan.echo, background=True)
        builder.created()
        queued = builder.obj
        # Room for the most the job's end can need: if its final object does not fit the
        # budget, the `failed` one `keep` stores instead must (usage at its widest).
        widest = {**queued, "usage": usage(*(history.USAGE_BOUND,) * 4)}
        fallback = StoredResponse.of(*history.too_large(widest, plan.items, builder.events[0],
                                                        ephemeral=not plan.store))
        if not await self._responses.put(response_id, history.record(queued, plan.items),
                                         pinned=True, reserve=fallback.size):
            raise RateLimited("the active background responses would exceed "
                              "--responses-store-max-bytes; retry after one finishes")
        try:
            handle = await self._registry.start(make, background=True)
        except BaseException:
            with trio.move_on_after(CANCEL_TIMEOUT, shield=True):
                await self._responses.delete(response_id)
            raise
        if self._board is not None:   # other processes on the store can follow and cancel it
            await self._board.claim(response_id)
            await self._board.mirror(handle)
        return handle

    # ---- counting and compacting -------------------------------------------------------

    async def count_input_tokens(self, req: CreateResponse) -> int:
        """The input's tokens exactly as `create` would render them."""
        _, rendered = await self.prepare(req, submits=False)
        return len(rendered.tokens)

    async def compact(self, req: CompactRequest) -> dict[str, Any]:
        """Summarizes a history into kept items plus one compaction item (a
        `CompactedHistory`); stores nothing.
        The history is `input`, after the `previous_response_id` chain if one is named (as
        OpenAI's API does; a superset of the seed, which refuses it)."""
        translate.check_model(req.model, self.model_names)
        for param in ("stream", "conversation"):
            if getattr(req, param) not in (None, False):
                raise InvalidRequest(f"'{param}' is not accepted by /v1/responses/compact; "
                                     "send the history in 'input' (and "
                                     "'previous_response_id')", param=param)
        context = self._model.info.context_length
        keep_tokens = req.keep_tokens
        if keep_tokens is not None and keep_tokens < 1:
            raise InvalidRequest("keep_tokens must be greater than 0", param="keep_tokens")
        max_tokens = compaction.SUMMARY_MAX_TOKENS if req.max_output_tokens is None \
            else req.max_output_tokens
        if not 1 <= max_tokens <= compaction.SUMMARY_MAX_TOKENS_LIMIT:
            raise InvalidRequest("max_output_tokens must be from 1 to "
                                 f"{compaction.SUMMARY_MAX_TOKENS_LIMIT}",
                                 param="max_output_tokens")
        as_create = CreateResponse(
            model=req.model, input=req.input, instructions=req.instructions, tools=req.tools,
            tool_choice=req.tool_choice, parallel_tool_calls=req.parallel_tool_calls,
            metadata=req.metadata, chat_template_kwargs=req.chat_template_kwargs,
            previous_response_id=req.previous_response_id)
        plan, rendered = await self.prepare(as_create, submits=False)
        if len(rendered.tokens) > context:
            raise ContextLengthExceeded(
                f"the history is {len(rendered.tokens)} tokens, longer than one context "
                f"window ({context}); compact it in parts", param="input")
        result = await compactor.compact(self._model, compactor.Transcript.of(plan),
                                         before=len(rendered.tokens),
                                         keep_tokens=keep_tokens, max_output_tokens=max_tokens,
                                         submits=False)
        return {"id": new_id("resp"), "object": "response.compaction",
                "created_at": int(time.time()), "model": req.model,
                "output": [*result.system, *result.kept, result.item], "usage": result.usage}

    # ---- a response's end (the supervisor's Keeper) --------------------------------------

    async def keep(self, plan: Plan, obj: dict[str, Any], events: list[dict[str, Any]]
                   ) -> None:
        """At a response's end: store it (see `_keep`). A shared store that went down since
        the create was accepted is retried for KEEP_RETRY_SECS, then the loss is logged."""
        deadline = trio.current_time() + KEEP_RETRY_SECS
        while True:
            try:
                await self._keep(plan, obj, events)
                return
            except StoreUnavailable as exc:
                if trio.current_time() >= deadline:
                    log.error("response %s was not stored: %s", obj["id"], exc.message)
                    return
                log.warning("response %s: store unavailable, retrying: %s", obj["id"],
                            exc.message)
                await trio.sleep(KEEP_RETRY_INTERVAL)

    async def _keep(self, plan: Plan, obj: dict[str, Any], events: list[dict[str, Any]]
                    ) -> None:
        """Store it (store: true, or any background job, whose final object replaces its
        pinned entry); then, if it finished, extend its conversation, if any, and remember
        the reasoning of the turn it returned."""
        if obj.get("background"):
            obj = await self._keep_job(plan, obj, events)
        elif plan.store:
            with contextlib.suppress(StoreDisabled):
                await self._responses.put(obj["id"], history.record(obj, plan.items), events)
        if obj["status"] not in ("completed", "incomplete"):
            return  # a failed or cancelled turn adds nothing
        turn = [*plan.messages, *chat_messages(None, obj["output"])]
        await self._echo.remember((key, m["reasoning_content"])
                                  for m, key in zip(turn, turn_keys(turn))
                                  if key is not None and m.get("reasoning_content"))
        if plan.conversation is not None:
            with contextlib.suppress(StoreDisabled):
                await self._conversations.append(plan.conversation,
                                                 [*plan.items, *obj["output"]])

    async def _keep_job(self, plan: Plan, obj: dict[str, Any], events: list[dict[str, Any]]
                        ) -> dict[str, Any]:
        """A finished job's final object becomes a stored response (store: false: readable
        for the ephemeral TTL only), replacing its pinned entry. One too big for the byte
        budget is replaced by a `failed` response with empty output, so polling still gets
        an answer; the pinned entry reserved room for that one (`_start_job`), so it is
        always kept. Returns the object as kept."""
        ephemeral = not plan.store
        record = history.record(obj, plan.items, ephemeral=ephemeral)
        if await self._responses.put(obj["id"], record, events, ephemeral=ephemeral):
            return obj
        record, kept_events = history.too_large(obj, plan.items, events[0],
                                                ephemeral=ephemeral)
        await self._responses.put(obj["id"], record, kept_events, ephemeral=ephemeral)
        return dict(record["response"])

    # ---- reading, cancelling, deleting -------------------------------------------------

    async def live(self, response_id: str) -> LiveResponse | None:
        """A response still running whose state is readable while it runs (a background
        job, or a stored one; with a shared store also a job another process runs), else
        None."""
        live = await self._registry.lookup(response_id)
        if live is not None and (live.background or live.snapshot.get("store")) \
                and not live.done:
            return live
        return await self._remote(response_id)

    async def _remote(self, response_id: str) -> RemoteJob | None:
        """A background job another process on the shared store is running, if it is one."""
        if self._board is None:
            return None
        record = await self._responses.get(response_id)
        if record is None or record["response"].get("status") in TERMINAL_STATUSES \
                or not record["response"].get("background"):
            return None
        owner = await self._board.owner(response_id)
        if owner is None or owner == self._board.worker_id:
            return None
        return RemoteJob(self._board, record, await self._board.events(response_id),
                         functools.partial(self._responses.get, response_id))

    async def reap(self) -> None:
        """Stores the jobs of processes that stopped (their lease ran out) as failed."""
        if self._board is None:
            return
        async for response_id in self._board.orphans:
            with contextlib.suppress(StoreUnavailable):
                await self._fail_orphan(response_id)

    async def _fail_orphan(self, response_id: str) -> None:
        record = await self._responses.get(response_id)
        if record is None or record["response"].get("status") in TERMINAL_STATUSES:
            return
        failed = {**record["response"], "status": "failed", "output": [],
                  "error": {"code": "server_error", "message": ORPHANED}}
        assert self._board is not None
        events = [e for _, e in await self._board.events(response_id)]
        closing = {"type": "response.failed",
                   "sequence_number": events[-1]["sequence_number"] + 1 if events else 0,
                   "response": failed}
        await self._responses.put(response_id, {**record, "response": failed},
                                  [*events, closing],
                                  ephemeral=record["response"].get("store") is False)
        await self._board.add_event(response_id, closing)
        log.warning("background response %s failed: %s", response_id, ORPHANED)

    async def stored(self, response_id: str) -> dict[str, Any]:
        """A stored response's record; 404 when there is none."""
        rec = await self._responses.get(response_id)
        if rec is None:
            raise NotFound(f"No response found with id '{response_id}'.",
                           param="response_id")
        return dict(rec)

    async def stored_events(self, response_id: str, starting_after: int
                            ) -> list[dict[str, Any]]:
        """A stored response's stream events after `starting_after`; 404 when none."""
        await self.stored(response_id)
        events = await self._responses.get_events(response_id) or []
        return [e for e in events if e["sequence_number"] > starting_after]

    async def input_items(self, response_id: str) -> list[dict[str, Any]]:
        return list((await self.stored(response_id))["input"])

    async def cancel(self, response_id: str) -> dict[str, Any]:
        """Cancels a live response and returns what a GET now returns; a finished one is
        returned unchanged. A job another process runs is cancelled by its owner (asked
        through the job board); this waits for it to end there."""
        self._responses.check_enabled()
        live = await self._registry.cancel(response_id)
        if live is not None:
            obj = await live.wait()
            if not (obj.get("store") or live.background):
                return obj
        elif (remote := await self._remote(response_id)) is not None:
            assert self._board is not None
            await self._board.request_cancel(response_id)
            with trio.move_on_after(CANCEL_TIMEOUT):
                await remote.wait()
        return dict((await self.stored(response_id))["response"])

    async def delete(self, response_id: str) -> None:
        """Deletes a stored response; an unfinished background job must be cancelled first."""
        self._responses.check_enabled()
        live: LiveResponse | None = await self._registry.lookup(response_id)
        if live is None or live.done:
            live = await self._remote(response_id)
        if live is not None and live.background and not live.done:
            raise InvalidRequest(f"background response '{response_id}' has not finished "
                                 f"(status: {live.polled()['status']}); cancel it before "
                                 "deleting it", param="response_id")
        if not await self._responses.delete(response_id):
            raise NotFound(f"No response found with id '{response_id}'.",
                           param="response_id")

    async def abandon(self, handle: LiveResponse) -> None:
        """A client that went away (disconnect, cancelled request) cancels its live
        response."""
        if not handle.done:
            with trio.move_on_after(CANCEL_TIMEOUT, shield=True):
                await self._registry.cancel(handle.response_id)


class LocalResponses:
    """One connection's own responses, as OpenAI's WebSocket mode keeps them: the `store:
    false` responses and warm-ups made on a socket can be named as `previous_response_id` by
    later creates on that socket (Codex sends `store: false` and continues each turn from the
    previous one). Each is remembered as its whole history (every earlier item, its input,
    its output); at most LOCAL_RESPONSES, least recently used first out. Owned by the
    connection's handler, which hands it to `Turns.create`/`warm`; only the turn service
    reads and writes it."""

    def __init__(self, limit: int = LOCAL_RESPONSES) -> None:
        self._limit = limit
        self._histories: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def history(self, response_id: str) -> list[dict[str, Any]] | None:
        found = self._histories.get(response_id)
        if found is None:
            return None
        self._histories.move_to_end(response_id)
        return list(found)

    def remember(self, response_id: str, items: list[dict[str, Any]]) -> None:
        self._histories[response_id] = items
        self._histories.move_to_end(response_id)
        while len(self._histories) > self._limit:
            self._histories.popitem(last=False)


@attrs.frozen
class _LocalKeeper:
    """The keeper of a response made on a connection with local responses: the turn
    service's `keep`, then a finished `store: false` response joins the connection's."""

    turns: Turns
    local: LocalResponses

    async def keep(self, plan: Plan, obj: dict[str, Any], events: list[dict[str, Any]]
                   ) -> None:
        await self.turns.keep(plan, obj, events)
        if obj.get("store") is False and obj["status"] in ("completed", "incomplete"):
            self.local.remember(obj["id"], [*plan.past, *plan.items, *obj["output"]])
