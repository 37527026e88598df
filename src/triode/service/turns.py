"""The turn service: the one object the HTTP layer calls for responses.

A thin facade over the three services a request's life passes through:

- `Preparer` (prepare.py): validation, history, rendering, truncation, the compaction
  decision; also `count_input_tokens`, `compact` and the WebSocket warm-up (`warm`);
- `Jobs` (jobs.py): background admission, live responses here or on another process
  (`live`, `cancel`), orphaned jobs (`reap`);
- `ResponseKeeper` (keeping.py): a response's end (`keep`: the store write, the
  conversation append, the reasoning echo) and the reads of what it kept.

`create` joins them: prepare, check the stores its end needs, then start a supervisor (a
background job through `Jobs`) whose keeper is the `ResponseKeeper`.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import attrs
import trio

from ..actors.jobs import JobBoardHandle
from ..actors.model import ModelHandle
from ..actors.registry import RegistryHandle
from ..actors.store import ConversationStoreHandle, ReasoningEchoHandle, ResponseStoreHandle
from ..actors.supervisor import Keeper, Supervisor, SupervisorHandle
from ..errors import InvalidRequest
from ..model.request import Rendered
from ..responses.ids import new_id
from ..responses.objects import AnyEvent, CompactedHistory, ResponseObject, StreamEvent
from ..responses.translate import Plan
from ..responses.wire import CompactRequest, CreateResponse
from .jobs import Jobs, LiveResponse
from .keeping import LocalKeeper, LocalResponses, ResponseKeeper
from .media import MediaLimits
from .prepare import Preparer
from .prompts import PromptTemplates
from ..actors.limits import TenantLimitsHandle, Ticket
from ..errors import StoreUnavailable
from ..storage.records import StoredResponse
from ..tenants import DEFAULT_TENANT, Tenant

__all__ = ["LocalResponses", "Started", "Turns"]

log = logging.getLogger(__name__)

LIMITS_TIMEOUT = 5.0   # returning a ticket to a shared store that hangs gives up after this


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
                 board: JobBoardHandle | None = None, prompts_dir: Path | None = None,
                 limits: TenantLimitsHandle | None = None, tenant: Tenant = DEFAULT_TENANT,
                 media: MediaLimits = MediaLimits()):
        """`background_off`: why background mode is off (one of its budgets is 0), if so.
        `board`: the job board of a shared store (background jobs across processes).
        `prompts_dir`: the stored prompt templates (`--prompts-dir`), if any.
        `limits`: the tenants' limits (None: unlimited). `tenant`: whose responses,
        conversations and reasoning these are, and whose limits apply; see `for_tenant`.
        `media`: the limits on images and files (`--media-*`)."""
        self._args = dict(model=model, registry=registry, responses=responses,
                          conversations=conversations, echo=echo, model_names=model_names,
                          hosted_tools=hosted_tools, background_off=background_off,
                          board=board, prompts_dir=prompts_dir, limits=limits, media=media)
        scope = tenant.scope
        self._tenants: dict[str, Turns] = {scope: self}
        self.tenant = tenant
        self._limits = limits
        responses = attrs.evolve(responses, scope=scope)
        conversations = attrs.evolve(conversations, scope=scope)
        echo = attrs.evolve(echo, scope=scope)
        self._model = model
        self._prompts = PromptTemplates(prompts_dir)
        self._registry = registry
        self.model_names = model_names
        self._jobs = Jobs(registry=registry, responses=responses, board=board,
                          background_off=background_off, scope=scope)
        self._keeper = ResponseKeeper(responses=responses, conversations=conversations,
                                      echo=echo)
        self._preparer = Preparer(model=model, responses=responses,
                                  conversations=conversations, echo=echo, jobs=self._jobs,
                                  model_names=model_names, hosted_tools=hosted_tools,
                                  media=media)

    def for_tenant(self, tenant: Tenant) -> Turns:
        """The turn service of one tenant: the same actors, seen through handles scoped to
        it (tenants.scoped), so its ids, items, conversations, jobs, reasoning and
        prompt-cache namespaces are its own and every other tenant's are not found. The one
        place a tenant's isolation is made; built once per tenant, its limits those of the
        table in force (a reloaded file's)."""
        found = self._tenants.get(tenant.scope)
        if found is None:
            found = Turns(**self._args, tenant=tenant)  # type: ignore[arg-type]
            found._tenants = self._tenants
            self._tenants[tenant.scope] = found
        found.tenant = tenant
        return found

    def _limited(self) -> bool:
        limits = self.tenant.limits
        return self._limits is not None and (limits.concurrent_requests is not None or
                                             limits.output_tokens_per_minute is not None)

    async def _begin(self) -> Ticket | None:
        """The tenant's concurrency ticket and token budget for one response (429 when
        either is used up); None when it has neither limit."""
        if not self._limited():
            return None
        assert self._limits is not None
        return await self._limits.begin(self.tenant)

    async def _end(self, ticket: Ticket | None, output_tokens: int) -> None:
        if ticket is not None:
            assert self._limits is not None
            with trio.move_on_after(LIMITS_TIMEOUT, shield=True):
                with contextlib.suppress(StoreUnavailable):
                    await self._limits.end(ticket, output_tokens)

    async def create(self, req: CreateResponse, local: LocalResponses | None = None
                     ) -> Started:
        """Starts a response (a background job: accepts it). `local`: the connection's own
        responses (a WebSocket's), which `previous_response_id` may name and which a
        `store: false` response made here joins."""
        req = await self._prompted(req)
        background = bool(req.background)
        if background and self._jobs.background_off is not None:
            self._preparer.check_model(req.model)
            raise InvalidRequest(f"background mode is off: {self._jobs.background_off}",
                                 param="background")
        plan, rendered = await self._preparer.prepare(req, local=local)
        await self._keeper.check_reachable(plan, background=background)
        if plan.dropped_tools:
            log.warning("dropped hosted tools this server cannot run: %s",
                        ", ".join(plan.dropped_tools))
        response_id = new_id("resp")
        ready = await self._preparer.ready(req, plan, rendered, background=background)
        keeper: Keeper = self._keeper if local is None else LocalKeeper(self._keeper, local)
        ticket = await self._begin()
        if ticket is not None:
            keeper = LimitedKeeper(keeper, self, ticket)

        def make() -> Supervisor:
            return Supervisor(response_id=response_id, plan=plan, ready=ready,
                              model=self._model, background=background, keeper=keeper,
                              key=self._jobs.key(response_id))

        try:
            if background:
                handle = await self._jobs.start(response_id, plan, make)
            else:
                handle = await self._registry.start(make)
        except BaseException:      # refused before it started: its keeper never runs
            await self._end(ticket, 0)
            raise
        return Started(handle, plan.stream, background, plan.dropped_tools)

    async def warm(self, req: CreateResponse, local: LocalResponses
                   ) -> tuple[str, list[StreamEvent]]:
        """A warm-up (`generate: false` over a WebSocket): the request validated and rendered
        as `create` would, answered with a completed response without output (usage counts
        its input) that a later create on the same connection may name as
        `previous_response_id`. Nothing is generated or stored. Returns (id, events)."""
        return await self._preparer.warm(await self._prompted(req), local)

    async def prepare(self, req: CreateResponse, *, submits: bool = True,
                      local: LocalResponses | None = None) -> tuple[Plan, Rendered]:
        """Validates a create (or input_tokens) request and renders its input as generation
        would see it (see `Preparer.prepare`)."""
        return await self._preparer.prepare(await self._prompted(req), submits=submits,
                                            local=local)

    async def count_input_tokens(self, req: CreateResponse) -> int:
        """The input's tokens exactly as `create` would render them."""
        return await self._preparer.count_input_tokens(await self._prompted(req))

    async def _prompted(self, req: CreateResponse) -> CreateResponse:
        """`req` with its stored prompt rendered into its instructions (a wrong model is
        still refused first)."""
        if req.prompt is not None:
            self._preparer.check_model(req.model)
        return await self._prompts.apply(req)

    async def compact(self, req: CompactRequest) -> CompactedHistory:
        """Summarizes a history into kept items plus one compaction item; stores nothing.
        It generates, so it counts against the tenant's limits as a response does."""
        ticket = await self._begin()
        output_tokens = 0
        try:
            compacted = await self._preparer.compact(req)
            output_tokens = compacted.usage.output_tokens
            return compacted
        finally:
            await self._end(ticket, output_tokens)

    async def keep(self, plan: Plan, obj: ResponseObject, events: list[StreamEvent]
                   ) -> None:
        """At a response's end: store it, extend its conversation, remember its reasoning
        (see `ResponseKeeper.keep`)."""
        await self._keeper.keep(plan, obj, events)

    async def live(self, response_id: str) -> LiveResponse | None:
        """A response still running whose state is readable while it runs, else None."""
        return await self._jobs.live(response_id)

    async def reap(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                   ) -> None:
        """Stores the jobs of processes that stopped as failed; started once those a
        restart interrupted are (`Jobs.reap`)."""
        await self._jobs.reap(task_status=task_status)

    async def stored(self, response_id: str) -> StoredResponse:
        """A stored response; 404 when there is none."""
        return await self._keeper.stored(response_id)

    async def stored_events(self, response_id: str, starting_after: int
                            ) -> list[AnyEvent]:
        """A stored response's stream events after `starting_after`; 404 when none."""
        return await self._keeper.stored_events(response_id, starting_after)

    async def input_items(self, response_id: str) -> list[dict[str, Any]]:
        return await self._keeper.input_items(response_id)

    async def cancel(self, response_id: str) -> ResponseObject:
        """Cancels a live response and returns what a GET now returns; a finished one is
        returned unchanged."""
        self._keeper.check_enabled()
        obj = await self._jobs.cancel(response_id)
        return obj if obj is not None \
            else (await self.stored(response_id)).response

    async def delete(self, response_id: str) -> None:
        """Deletes a stored response; an unfinished background job must be cancelled first."""
        self._keeper.check_enabled()
        await self._jobs.check_deletable(response_id)
        await self._keeper.delete(response_id)

    async def abandon(self, handle: LiveResponse) -> None:
        """A client that went away (disconnect, cancelled request) cancels its live
        response."""
        await self._jobs.abandon(handle)


@attrs.frozen
class LimitedKeeper:
    """The keeper of a response of a tenant with limits: the keeper's `keep`, then (however
    that ended) its concurrency ticket returned and its output tokens charged."""

    keeper: Keeper
    turns: Turns
    ticket: Ticket

    async def keep(self, plan: Plan, obj: ResponseObject, events: list[StreamEvent]
                   ) -> None:
        try:
            await self.keeper.keep(plan, obj, events)
        finally:
            await self.turns._end(self.ticket,
                                  obj.usage.output_tokens if obj.usage is not None else 0)
