"""Preparing a turn: a request becomes its `Plan` and rendered prompt, then a `Prepared`.

Validation, the history it continues (a `previous_response_id` chain, a conversation, or
a WebSocket connection's own responses), `item_reference`s resolved, the reasoning echo
restored, `truncation: auto`, and whether `context_management` compacts first. Shared by
create, input_tokens, compact and the WebSocket warm-up, so all of them count the same
tokens. It reads the stores and never writes them.
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any, Protocol

import attrs

from ..actors.model import ModelHandle
from ..actors.supervisor import PrepareLater
from ..errors import ContextLengthExceeded, InvalidRequest, StoreDisabled
from ..model.request import Rendered
from ..responses import compaction, history, translate
from ..responses.builder import ResponseBuilder
from ..responses.ids import new_id
from ..responses.objects import CompactedHistory, Item, StreamEvent, usage
from ..responses.items import canonical, chat_messages, turn_keys
from ..responses.lifecycle import Event, Lifecycle
from ..responses.prepared import Compacted, Prepared, finalize
from ..model.families import NONE
from ..responses.completions import RawPrompt
from ..responses.mcp import parse_servers, refuse_approvals
from ..responses.tools import declared_tools, parse_tool_choice, parse_tools
from ..responses.translate import Plan
from ..tenants import Caller
from ..responses.wire import (CompactionTrigger, CompactRequest, CreateResponse, InputItem,
                              ItemReference, Message)
from . import compactor
from .compactor import Transcript
from .background import Jobs
from .keeping import LocalResponses
from .mcp import McpService
from .media import Media
from .stores import Stores


class TurnInput(Protocol):
    """What a turn's prompt is made of, in a create (`CreateResponse`) and a compaction
    (`CompactRequest`) alike."""

    @property
    def model(self) -> str: ...
    @property
    def input(self) -> str | list[InputItem]: ...
    @property
    def instructions(self) -> str | None: ...
    @property
    def tools(self) -> list[dict[str, Any]] | None: ...
    @property
    def tool_choice(self) -> str | dict[str, Any] | None: ...
    @property
    def parallel_tool_calls(self) -> bool | None: ...
    @property
    def metadata(self) -> dict[str, str] | None: ...
    @property
    def chat_template_kwargs(self) -> dict[str, Any] | None: ...
    @property
    def previous_response_id(self) -> str | None: ...


class Preparer:
    def __init__(self, *, stores: Stores, jobs: Jobs, media: Media,
                 hosted_tools: str = "ignore", model: ModelHandle | None = None,
                 mcp: McpService | None = None):
        """`stores`: every tenant's (each call's `caller` picks its own, `Stores.of`).
        `jobs`: where a response that has not finished yet is found. `media`: the
        process's one reader of a request's images and files. `model`: the model it
        renders with (`on` gives one on another model); the request's model name was
        checked before (`Models.find`). `mcp`: the MCP servers requests may reach (None, or
        not enabled: an `mcp` tool is a hosted tool this server does not run)."""
        self._mcp = mcp if mcp is not None and mcp.enabled else None
        self._stores = stores
        self._jobs = jobs
        self._hosted_tools = hosted_tools
        self._media_limits = media
        self._media = media
        self._model_handle = model
        if model is not None:
            self._media = media.for_model(vision=model.info.vision)

    def on(self, model: ModelHandle) -> Preparer:
        """This Preparer rendering with `model` (a lease's; cheap: nothing is copied but
        the references)."""
        return Preparer(stores=self._stores, jobs=self._jobs, media=self._media_limits,
                        hosted_tools=self._hosted_tools, model=model, mcp=self._mcp)

    @property
    def _model(self) -> ModelHandle:
        assert self._model_handle is not None, "a Preparer renders only `on` a model"
        return self._model_handle

    async def prepare(self, caller: Caller, req: CreateResponse, *, submits: bool = True,
                      local: LocalResponses | None = None) -> tuple[Plan, Rendered]:
        """Validates a create (or input_tokens) request and renders its input as generation
        would see it: history (chain or conversation, compaction items replayed),
        instructions, tools, restored reasoning. `submits=False`: only counting, no
        generation follows. A `previous_response_id` is looked up among `local`'s
        responses first, then in the store."""
        translate.validate(req)
        past: list[Item] = []
        conversation = None
        if req.previous_response_id is not None:
            past = await self._earlier(caller, req.previous_response_id, local)
        elif req.conversation is not None:
            conversation = history.conversation_id(req.conversation)
            past = await self._stores.of(caller).conversations.get(conversation) or []
        given = req.input
        trigger = not isinstance(given, str) and bool(given) \
            and isinstance(given[-1], CompactionTrigger)
        if trigger:   # compact what comes before it; the trigger itself is never kept
            given = given[:-1]
        items = await self._canonical_input(caller, given, past)
        info = self._model.info
        mcp = None
        if self._mcp is None:
            refuse_approvals(items)
        else:
            # Listed (or reused) before the prompt is rendered: their tools are in it.
            mcp = await self._mcp.turn(caller, parse_servers(req.tools),
                                       compaction.replay([*past, *items]), items,
                                       soft=bool(req.stream or req.background) and submits)
        plan = translate.plan(req, info.sampling_defaults, past, conversation,
                              hosted_tools=self._hosted_tools, items=items,
                              family=info.family, mcp=mcp)
        if trigger:
            plan = attrs.evolve(plan, compact_now=True)
        if isinstance(req, RawPrompt):   # /v1/completions: the prompt as it stands
            plan = attrs.evolve(plan, raw_prompt=True)
            return plan, await self._model.tokenize(req.raw_prompt, submits=submits)
        plan = attrs.evolve(plan, messages=await self._with_reasoning(caller, plan.messages))
        rendered = await self._model.render(plan.messages, plan.template_tools,
                                            plan.template_kwargs, submits=submits)
        if plan.echo.truncation == "auto" and \
                len(rendered.tokens) >= self._model.info.context_length:
            plan, rendered = await self._truncated(caller, plan, submits=submits)
        return plan, rendered

    async def count_input_tokens(self, caller: Caller, req: CreateResponse) -> int:
        """The input's tokens exactly as `create` would render them."""
        _, rendered = await self.prepare(caller, req, submits=False)
        return len(rendered.tokens)

    async def warm(self, caller: Caller, req: CreateResponse, local: LocalResponses
                   ) -> tuple[str, list[StreamEvent]]:
        """A warm-up: prepared as a create, answered with a completed response without
        output (usage counts its input) that `local` remembers. Returns (id, events)."""
        plan, rendered = await self.prepare(caller, req, submits=False, local=local)
        builder = ResponseBuilder(new_id("resp"), plan.echo)
        builder.created()
        lifecycle = Lifecycle()
        builder.enter(lifecycle.move(Event.START))
        builder.enter(lifecycle.move(Event.COMPLETE), usage(len(rendered.tokens)))
        local.remember(builder.obj.id, [*plan.past, *plan.items])
        return builder.obj.id, builder.events

    async def ready(self, caller: Caller, plan: Plan, rendered: Rendered, *,
                    background: bool) -> Prepared | PrepareLater:
        """The turn as its supervisor takes it. With `context_management` past its
        threshold it is compacted first: now (a refusal is the create's 400), or, for a
        background job, by the job while it is queued (a refusal fails the job)."""
        if plan.compact_now:
            compact = functools.partial(self._compacted_only, caller, plan, rendered)
            return compact if background else await compact()
        if plan.raw_prompt:   # plain text out: no tool calls, no reasoning markers
            info = attrs.evolve(self._model.info, family=NONE, reasoning=False)
            return finalize(plan, rendered, info, cache_scope=caller.scope)
        if not self._needs_compaction(plan, rendered):
            return finalize(plan, rendered, self._model.info, cache_scope=caller.scope)
        if background:
            return functools.partial(self._compacted, caller, plan, rendered)
        return await self._compacted(caller, plan, rendered)

    async def compact(self, caller: Caller, req: CompactRequest) -> CompactedHistory:
        """Summarizes a history into kept items plus one compaction item (a
        `CompactedHistory`); stores nothing.
        The history is `input`, after the `previous_response_id` chain if one is named (as
        OpenAI's API does; a superset of the seed, which refuses it)."""
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
        transcript, rendered = await self.transcript(caller, req)
        if len(rendered.tokens) > context:
            raise ContextLengthExceeded(
                f"the history is {len(rendered.tokens)} tokens, longer than one context "
                f"window ({context}); compact it in parts", param="input")
        result = await compactor.compact(self._model, transcript, before=len(rendered.tokens),
                                         keep_tokens=keep_tokens, max_output_tokens=max_tokens,
                                         submits=False, short_ok=True,
                                         cache_key=caller.key(""))
        return CompactedHistory(id=new_id("resp"), created_at=int(time.time()),
                                model=req.model, usage=result.usage,
                                output=[*result.system, *result.kept, result.item])

    async def transcript(self, caller: Caller, turn: TurnInput
                         ) -> tuple[Transcript, Rendered]:
        """The history a compaction works on, rendered for counting: the
        `previous_response_id` chain, then the input, with the instructions and tools
        (validated as a create validates them). The same as `prepare`'s for a create that
        names no conversation."""
        translate.check_metadata(turn.metadata)
        past: list[Item] = []
        if turn.previous_response_id is not None:
            past = await self._earlier(caller, turn.previous_response_id, None)
        items = await self._canonical_input(caller, turn.input, past)
        replayed = compaction.replay([*past, *items])
        template_tools = self._template_tools(turn, replayed)
        template_kwargs = turn.chat_template_kwargs or {}
        messages = await self._with_reasoning(caller,
                                              chat_messages(turn.instructions, replayed))
        rendered = await self._model.render(messages, template_tools, template_kwargs,
                                            submits=False)
        return Transcript(turn.instructions, replayed, template_tools, template_kwargs), \
            rendered

    def _template_tools(self, turn: TurnInput, replayed: list[Item]
                        ) -> list[dict[str, Any]]:
        """The tools the chat template is shown, as `translate.plan` chooses them. A
        required tool choice compiles its grammar as a create does, so a tool schema that
        cannot be enforced is the same 400 here."""
        raw, params = declared_tools(replayed, turn.tools)
        tools = parse_tools(raw, hosted=self._hosted_tools, params=params,
                            mcp=self._mcp is not None)
        choice = parse_tool_choice(turn.tool_choice, tools)
        visible = [t for t in tools if t.chat_name in choice.allowed]
        if choice.mode == "required":
            translate.forced_calls(visible, choice, self._model.info.family,
                                   parallel=turn.parallel_tool_calls is not False)
        return [t.for_template() for t in visible]

    async def _earlier(self, caller: Caller, previous_response_id: str,
                       local: LocalResponses | None) -> list[Item]:
        """The items a `previous_response_id` continues: the connection's own response's,
        else the stored chain's (a response still running cannot be continued yet)."""
        if local is not None and (remembered := local.history(previous_response_id)) \
                is not None:
            return remembered
        live = await self._jobs.find_live(caller, previous_response_id)
        if live is not None:
            raise InvalidRequest(f"previous response '{previous_response_id}' has not "
                                 f"finished (status: {live.polled().status.value})",
                                 param="previous_response_id")
        return await history.chain(self._stores.of(caller).responses, previous_response_id)

    async def _canonical_input(self, caller: Caller, given: str | list[InputItem],
                               past: list[Item]) -> list[Item]:
        """The input as canonical items, every `item_reference` replaced by the item it
        names: one of the history's (the chain or conversation), else any stored
        response's input or output item (not a `store: false` one's). An unknown id is a
        400 naming it."""
        if isinstance(given, str):
            return [canonical(Message(role="user", content=given), "input[0]")]
        given = await self._media.resolve(given)
        known = {item.id: item for item in past}
        items: list[Item] = []
        for i, item in enumerate(given):
            if not isinstance(item, ItemReference):
                items.append(canonical(item, f"input[{i}]"))
                continue
            found = known.get(item.id)
            if found is None:
                with contextlib.suppress(StoreDisabled):
                    found = await self._stores.of(caller).responses.find_item(item.id)
            if found is None:
                raise InvalidRequest(f"Item with id '{item.id}' not found.",
                                     param=f"input[{i}].id")
            items.append(found)
        return items

    async def _with_reasoning(self, caller: Caller, messages: list[dict[str, Any]]
                              ) -> list[dict[str, Any]]:
        """The messages with the reasoning triode generated for each assistant turn sent
        back without it (the reasoning echo), so the prompt renders as it was generated.
        A new list; the messages given are not changed."""
        bare = [(i, key) for i, key in enumerate(turn_keys(messages))
                if key is not None and "reasoning_content" not in messages[i]]
        restored = list(messages)
        reasoning = self._stores.of(caller).reasoning
        for (i, _), text in zip(bare, await reasoning.recall(key for _, key in bare)):
            if text is not None:
                restored[i] = {**messages[i], "reasoning_content": text}
        return restored

    async def _truncated(self, caller: Caller, plan: Plan, *, submits: bool
                         ) -> tuple[Plan, Rendered]:
        """`truncation: auto`, as OpenAI defines it: the input is over the context window,
        so its oldest turns are dropped (at split points: a tool call never loses its
        output; system/developer messages and the last user message stay), as few as leave
        room for `max_output_tokens` (at most half the window; 1 token without it); found
        by bisection over the split points. Nothing can help: the 400
        `context_length_exceeded` a disabled truncation gives."""
        context = self._model.info.context_length
        limit = context - min(plan.max_output_tokens or 1, context // 2)
        candidates = compaction.truncations(plan.history)

        async def attempt(items: list[Item]) -> tuple[Plan, Rendered]:
            messages = await self._with_reasoning(
                caller, chat_messages(plan.echo.instructions, items))
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

    def _needs_compaction(self, plan: Plan, rendered: Rendered) -> bool:
        """context_management asks for compaction once the input reaches its threshold or
        leaves no room for output."""
        n = len(rendered.tokens)
        return plan.compact_threshold is not None and (
            n >= plan.compact_threshold or n >= self._model.info.context_length)

    async def _compacted(self, caller: Caller, plan: Plan, rendered: Rendered) -> Prepared:
        """Compacts the plan's history before generation; the output will open with the
        compaction item, and the kept turn is the compacted one."""
        result = await compactor.compact(self._model, Transcript.of(plan),
                                         before=len(rendered.tokens),
                                         cache_key=caller.key(""))
        compacted = attrs.evolve(plan, messages=result.messages)
        done = Compacted(result.item, result.before, result.after, result.usage)
        return finalize(compacted, result.rendered, self._model.info, done,
                        cache_scope=caller.scope)

    async def _compacted_only(self, caller: Caller, plan: Plan, rendered: Rendered
                              ) -> Prepared:
        """A trailing `compaction_trigger`: the history before it becomes one compaction
        item, the response's whole output; nothing is generated after it. A history too
        short to shrink is kept whole in the item, as /compact does."""
        result = await compactor.compact(self._model, Transcript.of(plan),
                                         before=len(rendered.tokens), submits=False,
                                         short_ok=True, cache_key=caller.key(""))
        done = Compacted(result.item, result.before, result.after, result.usage)
        return Prepared(plan, None, None, done)
