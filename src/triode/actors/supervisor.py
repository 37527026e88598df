"""One supervisor per response: drives it from queued to a terminal status.

It owns the response's cancel scope, its `ResponseBuilder` (object + event log) and the
generation slot it holds. Readers follow the event log through the handle; the log is
append-only, so a late reader replays what exists and then follows live.
"""

from __future__ import annotations

import logging
from typing import Any, AsyncIterator, Awaitable, Callable

import attrs
import trio

from ..errors import APIError, InvalidRequest
from ..model.engine import Sampling
from .events import ResponseBuilder, usage
from .lifecycle import Event, Status, is_terminal, next_status
from .model import ModelHandle
from .output import OutputAssembler, StopMatcher

log = logging.getLogger(__name__)

TERMINAL_HOOK_TIMEOUT = 5.0


@attrs.frozen
class Compacted:
    """A compaction done before generation: its item and the input sizes around it."""

    item: dict[str, Any]
    before: int
    after: int


@attrs.frozen
class Prepared:
    """A rendered prompt ready for generation, and how its output is assembled."""

    prompt: list[int]
    max_tokens: int
    assemble: Callable[[ResponseBuilder], OutputAssembler]
    grammar: Any = None
    compaction: Compacted | None = None


class Supervisor:
    def __init__(self, *, response_id: str, ready: Prepared | Callable[[], Awaitable[Prepared]],
                 sampling: Sampling, echo: dict[str, Any], model: ModelHandle,
                 stop: list[str] = (), top_logprobs: int | None = None,
                 background: bool = False,
                 on_terminal: Callable[[dict[str, Any], list[dict]], Awaitable[None]] | None = None):
        """`ready` is the prepared prompt, or an async function that prepares it inside the
        job while it is queued (a background job that compacts its history first): a
        refusal there fails the job (`invalid_prompt`) instead of the create call."""
        self.response_id = response_id
        self.background = background
        self._ready = ready if isinstance(ready, Prepared) else None
        self._prepare = None if isinstance(ready, Prepared) else ready
        self._sampling = sampling
        self._model = model
        self._on_terminal = on_terminal
        self.builder = ResponseBuilder(response_id, echo, background=background)
        self.builder.created()
        self._output = self._ready.assemble(self.builder) if self._ready else None
        self._stops = StopMatcher(list(stop))
        self._top_logprobs = top_logprobs
        self.status = Status.QUEUED
        self._changed = trio.Event()
        self._done = trio.Event()
        self._scope = trio.CancelScope()
        self._cancel_requested = False
        self._admitted = False
        self._task_status = trio.TASK_STATUS_IGNORED
        self._output_tokens = 0
        self._cached_tokens = 0

    def _move(self, event: Event) -> None:
        self.status = next_status(self.status, event)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
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
            if self._admitted:
                await self._end()

    async def _end(self) -> None:
        try:
            if not is_terminal(self.status):  # cancelled from outside (shutdown)
                self._move(Event.CANCEL)
                self.builder.cancel(self._usage())
            # Store before announcing the end: whoever saw the terminal state can GET it.
            if self._on_terminal is not None:
                with trio.move_on_after(TERMINAL_HOOK_TIMEOUT, shield=True):
                    await self._on_terminal(self.builder.obj, self.builder.events)
        finally:
            self._done.set()
            self._notify()

    def _report_started(self) -> None:
        self._admitted = True
        self._task_status.started(SupervisorHandle(self))

    async def _prepared(self) -> Prepared:
        self._report_started()
        try:
            self._ready = await self._prepare()
        except InvalidRequest as exc:  # rendering or compaction refused the request
            raise APIError(exc.message, code="invalid_prompt") from None
        self._output = self._ready.assemble(self.builder)
        return self._ready

    async def _generate(self) -> None:
        ready = self._ready or await self._prepared()
        async with self._model.generate(ready.prompt, ready.max_tokens, self._sampling,
                                        ready.grammar, self._top_logprobs) as adm:
            if not self._admitted:
                self._report_started()
            async for out in adm.outputs:
                if self.status is Status.QUEUED:
                    self._move(Event.START)
                    self.builder.in_progress()
                    if ready.compaction is not None:
                        c = ready.compaction
                        self.builder.compaction(c.item, c.before, c.after)
                self._output_tokens += 1
                self._cached_tokens += out.cached_tokens
                text, stopped = self._stops.feed(out.text)
                self._output.feed(text, out.logprobs)
                if out.error is not None:
                    raise APIError(f"constrained decoding failed: {out.error}")
                if stopped or out.finish_reason is not None:
                    if not stopped:
                        self._output.feed(self._stops.flush())
                    self._output.finish()
                    truncated = out.finish_reason == "length" and not stopped
                    event = Event.TRUNCATE if truncated else Event.COMPLETE
                    self._move(event)
                    self.builder.finish(self.status, self._usage())
                self._notify()
                if stopped or out.finish_reason is not None:
                    return  # leaving the block releases the slot
        raise APIError("generation ended without a finish reason (engine stopped)")

    def _usage(self) -> dict[str, Any]:
        ready, output = self._ready, self._output
        return usage(input_tokens=len(ready.prompt) if ready else 0,
                     output_tokens=self._output_tokens, cached_tokens=self._cached_tokens,
                     reasoning_tokens=output.reasoning_tokens if output else 0)

    def _fail(self, code: str, message: str) -> None:
        if is_terminal(self.status):
            return
        self._move(Event.FAIL)
        self.builder.fail(code, message, self._usage())

    def _finish_cancelled(self) -> None:
        if not self._cancel_requested:
            raise RuntimeError("supervisor scope cancelled without a cancel request")
        self._move(Event.CANCEL)
        self.builder.cancel(self._usage())

    def cancel(self) -> None:
        if not is_terminal(self.status):
            self._cancel_requested = True
            self._scope.cancel()


class SupervisorHandle:
    """What the HTTP layer and the registry hold for one live response."""

    def __init__(self, sup: Supervisor):
        self._sup = sup
        self.response_id = sup.response_id

    @property
    def done(self) -> bool:
        return self._sup._done.is_set()

    @property
    def status(self) -> str:
        return self._sup.status.value

    @property
    def background(self) -> bool:
        return self._sup.background

    @property
    def snapshot(self) -> dict[str, Any]:
        return self._sup.builder.obj

    def created(self) -> dict[str, Any]:
        """The object as it was created (queued): what a background create returns."""
        return self._sup.builder.events[0]["response"]

    def polled(self) -> dict[str, Any]:
        """What a poll of an unfinished response shows. A background job shows its status
        only: output [] and usage all 0 until it ends (the seed: no partial output)."""
        obj = self._sup.builder.obj
        if not self.background or self.done:
            return obj
        # Until its final object is stored (done), a job that just ended still reads as
        # in_progress: a poll that sees a terminal status must find it stored.
        status = obj["status"] if obj["status"] == Status.QUEUED.value else \
            Status.IN_PROGRESS.value
        return {**obj, "status": status, "output": [], "usage": usage()}

    def cancel(self) -> None:
        self._sup.cancel()

    async def wait(self) -> dict[str, Any]:
        await self._sup._done.wait()
        return self._sup.builder.obj

    async def follow(self, starting_after: int = -1) -> AsyncIterator[dict[str, Any]]:
        """Every event after `starting_after`, then live ones until the terminal state."""
        async for batch in self.follow_batches(starting_after):
            for event in batch:
                yield event

    async def follow_batches(self, starting_after: int = -1
                             ) -> AsyncIterator[list[dict[str, Any]]]:
        """As `follow`, but every event that is ready at a wake-up comes in one list, so a
        reader can write them with one send instead of one per event."""
        sup = self._sup
        i = starting_after + 1
        while True:
            events = sup.builder.events
            end = len(events)
            if is_terminal(sup.status) and not sup._done.is_set():
                end -= 1  # the last event waits until the response is stored (done)
            if i < end:
                batch = events[i:end]
                i += len(batch)
                yield batch
                continue  # more may have been appended while the batch was handled
            if sup._done.is_set():
                return
            await sup._changed.wait()
