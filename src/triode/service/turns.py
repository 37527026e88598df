"""The turn service: the one object the HTTP layer calls for responses.

A thin facade over the three services a request's life passes through:

- `Preparer` (prepare.py): validation, history, rendering, truncation, the compaction
  decision; also `count_input_tokens`, `compact` and the WebSocket warm-up (`warm`);
- `Jobs` (jobs.py): background admission, live responses here or on another process
  (`live`, `cancel`), orphaned jobs (`reap`);
- `ResponseKeeper` (keeping.py): a response's end (`keep`: the store write, the
  conversation append, the reasoning echo) and the reads of what it kept.

`create` joins them: prepare, check the stores its end needs, then start a supervisor (a
background job through `Jobs`) whose keeper is the `ResponseKeeper`. There is one for the
process: every method takes the request's `Caller` first, whose names it reads and writes
(`Stores.of`, `Caller.key`) and whose limits apply.
"""

from __future__ import annotations

import contextlib
import logging
import math
from pathlib import Path
from typing import Any, AsyncIterator

import attrs
import trio

from ..actors.jobs import JobBoardHandle
from ..actors.registry import RegistryHandle
from ..actors.supervisor import Keeper, Supervisor, SupervisorHandle
from ..errors import InvalidRequest
from ..model.catalog import ModelSpec
from ..settings import parse_keep_alive
from ..responses.ids import new_id
from ..responses.objects import CompactedHistory, ResponseObject, StreamEvent
from ..responses.translate import Plan
from ..responses.wire import CompactRequest, CreateResponse
from .background import Jobs, LiveResponse
from .keeping import LocalKeeper, LocalResponses, ResponseKeeper
from .mcp import McpService
from .media import Media, MediaLimits
from .models import ModelLease, Models
from .prepare import Preparer
from .prompts import PromptTemplates
from ..actors.limits import TenantLimitsHandle, Ticket
from ..errors import StoreUnavailable
from ..storage.records import StoredResponse
from ..tenants import Caller
from .stores import Stores

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
    def __init__(self, *, models: Models, registry: RegistryHandle, stores: Stores,
                 hosted_tools: str = "ignore",
                 background_off: str | None = None, board: JobBoardHandle | None = None,
                 prompts_dir: Path | None = None, limits: TenantLimitsHandle | None = None,
                 media: MediaLimits = MediaLimits(), load_timeout: float = math.inf,
                 mcp: McpService | None = None):
        """One for the process, every tenant's: each call names its `Caller`, whose view of
        the stores (`Stores.of`) it reads and writes and whose limits apply. `models`: the
        models a request may name; each call that renders or generates holds a lease on its
        model (loading it first, waiting up to `load_timeout` seconds).
        `background_off`: why background mode is off (one of its budgets is 0), if so.
        `board`: the job board of a shared store (background jobs across processes).
        `prompts_dir`: the stored prompt templates (`--prompts-dir`), if any.
        `limits`: the tenants' limits (None: unlimited). `media`: the limits on images and
        files (`--media-*`), read by one `Media` for the process. `mcp`: the MCP servers
        requests may reach (--mcp-config, --mcp-urls)."""
        self._models = models
        self._load_timeout = load_timeout
        self._stores = stores
        self._limits = limits
        self._prompts = PromptTemplates(prompts_dir)
        self._registry = registry
        self._jobs = Jobs(registry=registry, responses=stores.responses, board=board,
                          background_off=background_off)
        self._preparer = Preparer(stores=stores, jobs=self._jobs, hosted_tools=hosted_tools,
                                  media=Media(media), mcp=mcp)

    def _keeper(self, caller: Caller) -> ResponseKeeper:
        return ResponseKeeper(self._stores.of(caller))

    def _limited(self, caller: Caller) -> bool:
        limits = caller.limits
        return self._limits is not None and (limits.concurrent_requests is not None or
                                             limits.output_tokens_per_minute is not None)

    async def _begin(self, caller: Caller) -> Ticket | None:
        """The tenant's concurrency ticket and token budget for one response (429 when
        either is used up); None when it has neither limit."""
        if not self._limited(caller):
            return None
        assert self._limits is not None
        return await self._limits.begin(caller.tenant)

    async def _end(self, ticket: Ticket | None, output_tokens: int) -> None:
        if ticket is not None:
            assert self._limits is not None
            with trio.move_on_after(LIMITS_TIMEOUT, shield=True):
                with contextlib.suppress(StoreUnavailable):
                    await self._limits.end(ticket, output_tokens)

    async def create(self, caller: Caller, req: CreateResponse,
                     local: LocalResponses | None = None) -> Started:
        """Starts a response (a background job: accepts it). `local`: the connection's own
        responses (a WebSocket's), which `previous_response_id` may name and which a
        `store: false` response made here joins."""
        spec = self._models.find(req.model, caller)
        req = await self._prompted(req)
        background = bool(req.background)
        if background and self._jobs.background_off is not None:
            raise InvalidRequest(f"background mode is off: {self._jobs.background_off}",
                                 param="background")
        # A stream or a background job answers at once: it may wait for its model's
        # weights in the model's queue (response.created, or the job `queued`, first).
        lease = await self._lease(spec, req.keep_alive, early=bool(req.stream or background))
        try:
            return await self._start(caller, req, lease, background, local)
        except BaseException:      # refused before a supervisor took the lease over
            await lease.release()
            raise

    async def _start(self, caller: Caller, req: CreateResponse, lease: ModelLease,
                     background: bool, local: LocalResponses | None) -> Started:
        preparer = self._preparer.on(lease.handle)
        plan, rendered = await preparer.prepare(caller, req, local=local)
        keeping = self._keeper(caller)
        await keeping.check_reachable(plan, background=background)
        if plan.dropped_tools:
            log.warning("dropped hosted tools this server cannot run: %s",
                        ", ".join(plan.dropped_tools))
        response_id = new_id("resp")
        ready = await preparer.ready(caller, plan, rendered, background=background)
        keeper: Keeper = keeping if local is None else LocalKeeper(keeping, local)
        ticket = await self._begin(caller)
        if ticket is not None:
            keeper = LimitedKeeper(keeper, self, ticket)

        def make() -> Supervisor:
            return Supervisor(response_id=response_id, plan=plan, ready=ready,
                              model=lease.handle, background=background, keeper=keeper,
                              key=caller.key(response_id), lease=lease)

        try:
            if background:
                handle = await self._jobs.start(caller, response_id, plan, make)
            else:
                handle = await self._registry.start(make)
        except BaseException:      # refused before it started: its keeper never runs
            await self._end(ticket, 0)
            raise
        return Started(handle, plan.stream, background, plan.dropped_tools)

    async def _lease(self, spec: ModelSpec, keep_alive: str | float | None, *,
                     early: bool = False) -> ModelLease:
        """A lease on the request's model (loaded first if it is not); `keep_alive`: the
        request's, how long the model stays loaded once idle."""
        seconds = None
        if keep_alive is not None:
            try:
                seconds = parse_keep_alive(keep_alive)
            except ValueError as exc:
                raise InvalidRequest(f"Invalid 'keep_alive': {exc}",
                                     param="keep_alive") from None
        return await self._models.acquire(spec, keep_alive=seconds,
                                          timeout=self._load_timeout, early=early)

    @contextlib.asynccontextmanager
    async def _preparing(self, spec: ModelSpec, keep_alive: str | float | None = None
                         ) -> AsyncIterator[Preparer]:
        """A Preparer on `spec`'s model, leased for the block."""
        lease = await self._lease(spec, keep_alive)
        try:
            yield self._preparer.on(lease.handle)
        finally:
            await lease.release()

    async def warm(self, caller: Caller, req: CreateResponse, local: LocalResponses
                   ) -> tuple[str, list[StreamEvent]]:
        """A warm-up (`generate: false` over a WebSocket): the request validated and rendered
        as `create` would, answered with a completed response without output (usage counts
        its input) that a later create on the same connection may name as
        `previous_response_id`. Nothing is generated or stored. Returns (id, events)."""
        spec = self._models.find(req.model, caller)
        req = await self._prompted(req)
        async with self._preparing(spec, req.keep_alive) as preparer:
            return await preparer.warm(caller, req, local)

    async def count_input_tokens(self, caller: Caller, req: CreateResponse) -> int:
        """The input's tokens exactly as `create` would render them."""
        spec = self._models.find(req.model, caller)
        req = await self._prompted(req)
        async with self._preparing(spec, req.keep_alive) as preparer:
            return await preparer.count_input_tokens(caller, req)

    async def _prompted(self, req: CreateResponse) -> CreateResponse:
        """`req` with its stored prompt rendered into its instructions (its model was
        checked first)."""
        return await self._prompts.apply(req)

    async def compact(self, caller: Caller, req: CompactRequest) -> CompactedHistory:
        """Summarizes a history into kept items plus one compaction item; stores nothing.
        It generates, so it counts against the tenant's limits as a response does."""
        ticket = await self._begin(caller)
        output_tokens = 0
        try:
            async with self._preparing(self._models.find(req.model, caller)) as preparer:
                compacted = await preparer.compact(caller, req)
            output_tokens = compacted.usage.output_tokens
            return compacted
        finally:
            await self._end(ticket, output_tokens)

    async def live(self, caller: Caller, response_id: str) -> LiveResponse | None:
        """A response still running whose state is readable while it runs, else None."""
        return await self._jobs.live(caller, response_id)

    async def reap(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                   ) -> None:
        """Stores the jobs of processes that stopped as failed; started once those a
        restart interrupted are (`Jobs.reap`)."""
        await self._jobs.reap(task_status=task_status)

    async def stored(self, caller: Caller, response_id: str) -> StoredResponse:
        """A stored response; 404 when there is none."""
        return await self._keeper(caller).stored(response_id)

    async def stored_events(self, caller: Caller, response_id: str, starting_after: int
                            ) -> list[StreamEvent]:
        """A stored response's stream events after `starting_after`; 404 when none."""
        return await self._keeper(caller).stored_events(response_id, starting_after)

    async def input_items(self, caller: Caller, response_id: str) -> list[dict[str, Any]]:
        return await self._keeper(caller).input_items(response_id)

    async def cancel(self, caller: Caller, response_id: str) -> ResponseObject:
        """Cancels a live response and returns what a GET now returns; a finished one is
        returned unchanged."""
        keeping = self._keeper(caller)
        keeping.check_enabled()
        obj = await self._jobs.cancel(caller, response_id)
        return obj if obj is not None \
            else (await keeping.stored(response_id)).response

    async def delete(self, caller: Caller, response_id: str) -> None:
        """Deletes a stored response; an unfinished background job must be cancelled first."""
        keeping = self._keeper(caller)
        keeping.check_enabled()
        await self._jobs.check_deletable(caller, response_id)
        await keeping.delete(response_id)

    async def abandon(self, caller: Caller, handle: LiveResponse) -> None:
        """A client that went away (disconnect, cancelled request) cancels its live
        response."""
        await self._jobs.abandon(caller, handle)


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
