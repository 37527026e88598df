"""One supervisor per response: drives it from queued to a terminal status.

It owns the response's cancel scope, its `ResponseBuilder` (object + event log) and the
generation slot it holds. Readers follow the event log through the handle; the log is
append-only, so a late reader replays what exists and then follows live.
"""

from __future__ import annotations

import logging
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol

import attrs

import trio

from ..errors import APIError, InvalidRequest
from ..responses.builder import ResponseBuilder
from ..model.request import GenerationRequest
from ..responses.items import chat_messages
from ..responses.objects import (McpCallItem, ResponseError, ResponseEvent, ResponseObject,
                                 StreamEvent, Usage, usage)
from ..responses.lifecycle import Event, Lifecycle, Status
from ..responses.output import OutputAssembler, StopMatcher
from ..responses.mcp import McpTurn
from ..responses.prepared import Prepared, continued
from ..responses.translate import Plan
from .model import ModelHandle

log = logging.getLogger(__name__)

TERMINAL_HOOK_TIMEOUT = 5.0

PrepareLater = Callable[[], Awaitable[Prepared]]


class Keeper(Protocol):
    """What a response's end is handed to, before anyone is told it ended (the turn
    service: store the response, extend its conversation, remember its reasoning)."""

    async def keep(self, plan: Plan, obj: ResponseObject,
                   events: list[StreamEvent]) -> None: ...


class Releasable(Protocol):
    """A hold on something released once, at the end (a models registry lease)."""

    async def release(self) -> None: ...


class Supervisor:
    def __init__(self, *, response_id: str, plan: Plan, ready: Prepared | PrepareLater,
                 model: ModelHandle, background: bool = False, keeper: Keeper | None = None,
                 key: str | None = None, lease: Releasable | None = None):
        """`ready` is the prepared turn, or an async function that prepares it inside the
        job while it is queued (a background job that compacts its history first): a
        refusal there fails the job (`invalid_prompt`) instead of the create call. `plan`
        is the turn as requested; the keeper gets the prepared one's (compacted) plan.
        `key`: the name the registry and the job board know it by (its tenant's,
        tenants.scoped; default: its id). `lease`: its hold on its model (the models
        registry's), released when it ends, so the model is never unloaded under it."""
        self.response_id = response_id
        self.key = key or response_id
        self.background = background
        self._plan = plan
        self._ready = ready if isinstance(ready, Prepared) else None
        self._prepare = None if isinstance(ready, Prepared) else ready
        self._model = model
        self._lease = lease
        self._keeper = keeper
        self.builder = ResponseBuilder(response_id, plan.echo, background=background)
        self.builder.created()
        self._output: OutputAssembler | None = None
        self._stops = StopMatcher([])
        if self._ready is not None:
            self._take(self._ready)
        # The one owner of its status (and of when each was entered, for the live page);
        # the builder renders each status it enters (`_move`).
        self.lifecycle = Lifecycle()
        self._changed = trio.Event()
        self._done = trio.Event()
        self._scope = trio.CancelScope()
        self._cancel_requested = False
        self._shutdown_reason: str | None = None
        self._admitted = False
        self._task_status: trio.TaskStatus[SupervisorHandle] = trio.TASK_STATUS_IGNORED
        self._output_tokens = 0
        self._cached_tokens = 0
        self._input_tokens = 0       # of every generation's prompt
        self._reasoning_tokens = 0   # of the generations before the current one
        self._calls_made = 0         # tool calls the model made, of any kind
        # Its MCP calls run (one entry each, as the live page shows them: [label.name,
        # started, ended, status]).
        self.mcp_timeline: list[list[Any]] = []
        self.accepted_drafts = 0   # output tokens that were accepted speculative drafts
        self.stop_sequence: str | None = None   # the stop sequence that ended it, if one did

    def _take(self, ready: Prepared) -> None:
        self._ready = ready
        self._plan = ready.plan
        if ready.generation is not None and ready.assemble is not None:
            self._output = ready.assemble(self.builder)
            self._stops = StopMatcher(list(ready.generation.stop))

    # ---- what the handle reads (same thread, read-only) ----------------------------------

    @property
    def done(self) -> bool:
        """Ended and kept: the terminal event may be announced."""
        return self._done.is_set()

    async def wait_done(self) -> None:
        await self._done.wait()

    async def wait_changed(self) -> None:
        """Returns at the next event appended (or at the end)."""
        await self._changed.wait()

    @property
    def status(self) -> Status:
        return self.lifecycle.status

    def _move(self, event: Event, usage_: Usage | None = None,
              error: ResponseError | None = None) -> None:
        """The response's one way to a new status: the lifecycle moves, the builder renders
        it (the object and its event)."""
        self.builder.enter(self.lifecycle.move(event), usage_, error)

    @property
    def output_tokens(self) -> int:
        """Tokens generated so far."""
        return self._output_tokens

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def run(self, *,
                  task_status: trio.TaskStatus[SupervisorHandle] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Reports started (with its handle) once the model actor has taken the request into
        a slot or its wait queue; a refusal before that (a full queue: Overloaded) propagates
        to whoever started it, and nothing was created."""
        self._task_status = task_status
        try:
            with self._scope:
                await self._generate()
            if self._scope.cancelled_caught:
                self._finish_cancelled()
        except APIError as exc:
            if not self._admitted:
                raise
            self._fail(exc.code or "server_error", exc.message)
        except Exception as exc:  # one response fails; the server keeps serving
            if not self._admitted:
                raise
            log.exception("response %s failed", self.response_id)
            self._fail("server_error", f"internal error: {type(exc).__name__}")
        finally:
            try:
                if self._admitted:
                    await self._end()
            finally:
                if self._lease is not None:
                    await self._lease.release()

    async def _end(self) -> None:
        try:
            if not self.lifecycle.terminal:  # the actor tree stopped under it (not drained)
                self._move(Event.CANCEL, self._usage())
            # Store before announcing the end: whoever saw the terminal state can GET it.
            if self._keeper is not None:
                with trio.move_on_after(TERMINAL_HOOK_TIMEOUT, shield=True):
                    await self._keeper.keep(self._plan, self.builder.obj, self.builder.events)
        finally:
            self._done.set()
            self._notify()

    def _report_started(self) -> None:
        self._admitted = True
        self._task_status.started(SupervisorHandle(self))

    async def _prepared(self, prepare: PrepareLater) -> Prepared:
        self._report_started()
        try:
            ready = await prepare()
        except InvalidRequest as exc:  # rendering or compaction refused the request
            raise APIError(exc.message, code="invalid_prompt") from None
        self._take(ready)
        return ready

    async def _generate(self) -> None:
        ready = self._ready
        if ready is None:
            assert self._prepare is not None
            ready = await self._prepared(self._prepare)
        if ready.generation is None:
            self._compaction_only(ready)
            return
        generation, output = ready.generation, self._output
        assert output is not None
        mcp = ready.plan.mcp
        if mcp is not None and (mcp.failure is not None or mcp.approved):
            # Nothing is generated before a failed listing ends the response, or before
            # the calls its input approved have run (their results are in the prompt).
            if not self._admitted:
                self._report_started()
            self._begin(ready)
            if mcp.failure is not None:
                raise APIError(mcp.failure, code="external_connector_error")
            for request in mcp.approved:
                await self._run(mcp, self.builder.mcp_call_whole(
                    label=request.server_label, name=request.name,
                    arguments=request.arguments, approval_request_id=request.id))
            following = await self._continued(ready, mcp)
            if following is None:
                self._finish(truncated=True)
                return
            generation, output = following
        while True:
            truncated, stopped = await self._one(ready, generation, output)
            if mcp is not None and not truncated and output.mcp_ready:
                self._calls_made += output.call_count
                for item in output.mcp_ready:
                    await self._run(mcp, item)
                if not (stopped or output.approval_requests or output.client_calls):
                    # The model goes on with the results, in the same response.
                    following = await self._continued(ready, mcp)
                    if following is not None:
                        generation, output = following
                        continue
                    truncated = True
            self._finish(truncated=truncated)
            return

    def _begin(self, ready: Prepared) -> None:
        """in_progress, with what was done before generation: the compaction's item and
        the MCP listings this response made."""
        if self.status is not Status.QUEUED:
            return
        self._move(Event.START)
        if ready.compaction is not None:
            c = ready.compaction
            self.builder.compaction(c.item, c.before, c.after)
        if ready.plan.mcp is not None:
            for listing in ready.plan.mcp.listings:
                self.builder.mcp_listing(listing.server_label, listing.tools, listing.error,
                                         listing.id)
        self._notify()

    async def _one(self, ready: Prepared, generation: GenerationRequest,
                   output: OutputAssembler) -> tuple[bool, bool]:
        """One generation of the response, to its end: (cut off by the token limit,
        ended by a stop sequence)."""
        self._input_tokens += len(generation.prompt)
        async with self._model.generate(generation) as adm:
            if not self._admitted:
                self._report_started()
            async for out in adm.outputs:
                self._begin(ready)
                self._output_tokens += 1
                self.accepted_drafts += out.drafted
                self._cached_tokens += out.cached_tokens
                text, stopped = self._stops.feed(out.text)
                if stopped:
                    self.stop_sequence = self._stops.matched
                output.feed(text, out.logprobs)
                if out.error is not None:
                    raise APIError(out.error)
                if stopped or out.finish_reason is not None:
                    if not stopped:
                        output.feed(self._stops.flush())
                    output.finish()
                    self._notify()
                    return out.finish_reason == "length" and not stopped, stopped
                self._notify()
        raise APIError("generation ended without a finish reason (engine stopped)")

    def _finish(self, *, truncated: bool) -> None:
        self._move(Event.TRUNCATE if truncated else Event.COMPLETE, self._usage())
        self._notify()

    async def _run(self, mcp: McpTurn, item: McpCallItem) -> None:
        """One MCP call, on the response's behalf (its cancellation cancels the call)."""
        entry: list[Any] = [f"{item.server_label}.{item.name}", time.time(), None, "calling"]
        self.mcp_timeline.append(entry)
        self._notify()
        try:
            result, error = await mcp.runner.call(item.server_label, item.name,
                                                  item.arguments)
        finally:
            entry[2], entry[3] = time.time(), "cancelled"
        entry[3] = "failed" if error is not None else "completed"
        self.builder.mcp_call_end(item, result, error)
        self._notify()

    async def _continued(self, ready: Prepared, mcp: McpTurn
                         ) -> tuple[GenerationRequest, OutputAssembler] | None:
        """The next generation of a response whose MCP calls ran: its prompt with the
        output so far. No more calls once `max_tool_calls` or the per-response cap is
        reached. None when no output token is left."""
        plan = ready.plan
        messages = [*plan.messages,
                    *chat_messages(None, self.builder.obj.output, mcp.rendered_calls)]
        rendered = await self._model.render(messages, plan.template_tools,
                                            plan.template_kwargs)
        cap = plan.echo.max_tool_calls
        tools_off = len(self.mcp_timeline) >= mcp.runner.max_calls or (
            cap is not None and self._calls_made >= cap)
        following = continued(ready, rendered, self._model.info,
                              generated=self._output_tokens, calls_made=self._calls_made,
                              tools_off=tools_off)
        if following is None:
            return None
        generation, assemble = following
        if self._output is not None:
            self._reasoning_tokens += self._output.reasoning_tokens
        self._output = output = assemble(self.builder)
        self._stops = StopMatcher(list(generation.stop))
        return generation, output

    def _compaction_only(self, ready: Prepared) -> None:
        """A compaction that is the whole answer (a compaction_trigger): it ran while the
        turn was prepared; no generation slot is taken."""
        if not self._admitted:
            self._report_started()
        assert ready.compaction is not None
        c = ready.compaction
        self._move(Event.START)
        self.builder.compaction(c.item, c.before, c.after)
        self._move(Event.COMPLETE, usage(input_tokens=c.before,
                                         output_tokens=c.usage.output_tokens))
        self._notify()

    def _usage(self) -> Usage:
        """Every generation's tokens (a response that ran MCP calls generated more than
        once: their prompts' tokens add up, as OpenAI counts them)."""
        ready, output = self._ready, self._output
        prompt = ready.generation.prompt if ready and ready.generation else ()
        return usage(input_tokens=self._input_tokens or len(prompt),
                     output_tokens=self._output_tokens, cached_tokens=self._cached_tokens,
                     reasoning_tokens=self._reasoning_tokens
                     + (output.reasoning_tokens if output else 0))

    def _fail(self, code: str, message: str) -> None:
        if self.lifecycle.terminal:
            return
        self._move(Event.FAIL, self._usage(), ResponseError(code, message))

    def _finish_cancelled(self) -> None:
        if self._shutdown_reason is not None:
            self._fail("server_error", self._shutdown_reason)
            return
        if not self._cancel_requested:
            raise RuntimeError("supervisor scope cancelled without a cancel request")
        self._move(Event.CANCEL, self._usage())

    def cancel(self) -> None:
        if not self.lifecycle.terminal and self._shutdown_reason is None:
            self._cancel_requested = True
            self._scope.cancel()

    def shut_down(self, reason: str) -> None:
        """Ends the response now as `failed` with `reason` (the server is shutting down): it
        is stored, and its stream gets `response.failed`. A cancel asked for first stays a
        cancel."""
        if not self.lifecycle.terminal and not self._cancel_requested:
            self._shutdown_reason = reason
            self._scope.cancel()


@attrs.frozen
class ResponseSummary:
    """One response as the live page (`/ui`) shows it: its status with the time it entered
    each one (wall clock), tokens so far and, once it has ended, its usage (input, cached,
    output tokens). `ttft`: seconds from its creation to its first token (queue wait,
    rendering and prefill), None before it."""

    response_id: str
    key: str              # the registry's name for it (its tenant's: tenants.scoped)
    status: Status
    background: bool
    store: bool
    done: bool
    output_tokens: int
    timeline: tuple[tuple[Status, float], ...]
    ttft: float | None
    usage: Usage | None
    # Its MCP calls: (label.name, started, ended or None, calling | completed | failed |
    # cancelled), wall clock.
    mcp_calls: tuple[tuple[str, float, float | None, str], ...] = ()


class SupervisorHandle:
    """What the HTTP layer and the registry hold for one live response.

    It reads its supervisor's state directly, through the supervisor's public read-only
    members (`done`, `status`, `builder`, `wait_done`, `wait_changed`): both live in the trio
    thread, the event log is append-only and only the supervisor writes, so a read is never
    torn. Everything that changes a supervisor goes through it (`cancel`)."""

    def __init__(self, sup: Supervisor):
        self._sup = sup
        self.response_id = sup.response_id
        self.key = sup.key

    @property
    def done(self) -> bool:
        return self._sup.done

    @property
    def status(self) -> Status:
        return self._sup.status

    @property
    def background(self) -> bool:
        return self._sup.background

    @property
    def accepted_drafts(self) -> int:
        """Its output tokens that were accepted speculative drafts, so far."""
        return self._sup.accepted_drafts

    @property
    def stop_sequence(self) -> str | None:
        """The stop sequence that ended its output, if one did (Anthropic's Messages API
        reports it)."""
        return self._sup.stop_sequence

    @property
    def snapshot(self) -> ResponseObject:
        return self._sup.builder.obj

    def created(self) -> ResponseObject:
        """The object as it was created (queued): what a background create returns."""
        created = self._sup.builder.events[0]
        assert isinstance(created, ResponseEvent)   # response.created comes first
        return created.response

    def polled(self) -> ResponseObject:
        """What a poll of an unfinished response shows. A background job shows its status
        only: output [] and usage all 0 until it ends (no partial output: docs/architecture.md)."""
        obj = self._sup.builder.obj
        if not self.background or self.done:
            return obj
        # Until its final object is stored (done), a job that just ended still reads as
        # in_progress: a poll that sees a terminal status must find it stored.
        status = Status.QUEUED if obj.status is Status.QUEUED else Status.IN_PROGRESS
        return attrs.evolve(obj, status=status, output=[], usage=usage(),
                            completed_at=None)

    def summary(self) -> ResponseSummary:
        """What the live page shows of this response, as of now."""
        sup = self._sup
        obj = sup.builder.obj
        timeline = tuple(sup.lifecycle.timeline)
        first = next((at for status, at in timeline if status is Status.IN_PROGRESS), None)
        done = sup.done
        return ResponseSummary(
            response_id=self.response_id, key=self.key, status=self.status,
            background=self.background,
            store=bool(obj.store), done=done, output_tokens=sup.output_tokens,
            timeline=timeline,
            ttft=None if first is None else first - timeline[0][1],
            usage=obj.usage if done else None,
            mcp_calls=tuple((name, started, ended, status)
                            for name, started, ended, status in sup.mcp_timeline))

    def cancel(self) -> None:
        self._sup.cancel()

    def shut_down(self, reason: str) -> None:
        self._sup.shut_down(reason)

    async def wait(self) -> ResponseObject:
        await self._sup.wait_done()
        return self._sup.builder.obj

    async def follow_batches(self, starting_after: int = -1
                             ) -> AsyncIterator[list[StreamEvent]]:
        """Every event after `starting_after`, then live ones until the terminal state; every
        event that is ready at a wake-up comes in one list, so a reader can write them with
        one send instead of one per event."""
        sup = self._sup
        i = starting_after + 1
        while True:
            events = sup.builder.events
            end = len(events)
            if sup.lifecycle.terminal and not sup.done:
                end -= 1  # the last event waits until the response is stored (done)
            if i < end:
                batch = events[i:end]
                i += len(batch)
                yield batch
                continue  # more may have been appended while the batch was handled
            if sup.done:
                return
            await sup.wait_changed()
