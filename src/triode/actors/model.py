"""The model actor: the trio half of generation.

It owns the generation slots (`--parallel`), the wait queue (`--max-queue`) and one output
channel per admitted request, and it is the only party the engine thread talks to. Requests
join and leave the engine's running batch between steps (continuous batching).

If the engine thread dies while the process lives, every request it held ends without a
finish reason (its response fails with `server_error`) and the actor starts a fresh engine;
requests that arrive meanwhile wait in the queue for it. An exception while the actor
handles a step's outputs counts as such a death: that engine is stopped and replaced. After
`MAX_RESTARTS` deaths within `RESTART_WINDOW` seconds it gives up and refuses new requests
(500).

Under `--distributed` (model/lockstep.py) the engine is rank 0 of a group and cannot be
replaced alone: its death, or no step within `--distributed-watchdog` seconds while requests
run (a rank stalled), fails the group (`GroupFailure`): every held request ends as above,
new ones get a 503, and the CLI acts as `--distributed-on-failure` says.

It is also the one owner of generation's figures (`statistics()`): token counts, how each
sequence ended, and the latency histograms, timed from the Submit that asked for a slot.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import time
from collections import deque
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import attrs
import trio

from ..errors import InvalidRequest, ModelUnavailable, Overloaded, ServerError
from ..model.engine import (Command, Engine, EngineOptions, Insert, Remove, Step,
                            StepOutput)
from ..model.loading import ModelInfo
from ..model.lockstep import RankFigures
from ..model.prompt_cache import CacheFigures
from ..model.request import GenerationRequest, Rendered
from ..model.speculative_stats import SpeculationStatistics
from ..model.vision import prompter_of
from ..responses.items import message_images
from .host import EngineHost, EngineStopping, SteppedEngine
from .mailbox import answer, ask
from .messages import (Admission, DistributedStatistics, GenerationStatistics,
                       HistogramStatistics, ModelMessage, ModelStatistics,
                       ModelStatisticsRequest, PromptCacheStatistics, Release, Rendering,
                       Submit)

log = logging.getLogger(__name__)

# Chat templates whose text content is longer than this render one at a time, on a limiter
# of their own: tokenizing takes about a second per MB here, and ordinary requests must not
# queue behind such inputs (most of which are refused as longer than the context anyway).
LARGE_RENDER_CHARS = 1 << 20
# A consumer more than this many steps behind is cut off rather than stalling the batch.
STREAM_BUFFER_STEPS = 4096
INBOX_SIZE = 1024
RELEASE_TIMEOUT = 5.0
# How long an Insert may be held back to be prefilled together with requests still being
# rendered (see ModelActor._flush); a hold normally ends sooner, at those requests' Submit.
ADMISSION_HOLD_MAX = 0.02
MAX_RESTARTS = 5          # engine deaths tolerated within RESTART_WINDOW
RESTART_WINDOW = 300.0    # seconds
RESTART_DELAY = 0.5       # seconds before the first restart; doubles with each recent death

# How a sequence ended: its finish reason (`stop`, `length`), `error` (constrained decoding
# failed), `released` (its consumer let go before its end: a cancel, a disconnect, or a stop
# sequence the supervisor matched; the actor cannot tell them apart), `cut_off` (its consumer
# fell STREAM_BUFFER_STEPS behind or went away), `engine_failed` (the engine died under it).
OUTCOMES = ("stop", "length", "error", "released", "cut_off", "engine_failed")

# Histogram bucket bounds, seconds. A small model on a CPU decodes a token in milliseconds; a
# large one on a busy queue waits minutes: the bounds span both.
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                120.0, 300.0)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0,
                 2.5)
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
                    600.0, 1200.0)


WATCHDOG_POLL = 0.5       # seconds between two looks of the --distributed watchdog


@attrs.define(eq=False)
class GroupFailure:
    """--distributed: why the group of ranks failed, set once by rank 0's model actor; the
    CLI waits on it (`--distributed-on-failure`)."""

    failed: trio.Event = attrs.Factory(trio.Event)
    reason: str | None = None

    def fail(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            self.failed.set()


class Histogram:
    """Observations counted in fixed buckets, with their sum (Prometheus' histogram). Its
    owner observes and reads it in one thread, so it needs no lock."""

    def __init__(self, bounds: tuple[float, ...]):
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)   # the last one: above every bound
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value

    def statistics(self) -> HistogramStatistics:
        return HistogramStatistics(
            bounds=self._bounds, cumulative=tuple(itertools.accumulate(self._counts[:-1])),
            count=sum(self._counts), sum=self._sum)


@attrs.define
class Arrivals:
    """Requests between arrival and Submit, as far as the model knows: chat templates being
    rendered (or waiting for a render thread), and rendered ones whose Submit has not come
    yet. The actor's state; `ModelHandle.render` reports to it by message."""

    rendering: int = 0
    rendered: int = 0

    @property
    def expected(self) -> bool:
        return bool(self.rendering or self.rendered)


class ModelHandle:
    """What callers hold. The tokenizer is read-only after load, so rendering runs in worker
    threads without a round trip through the actor."""

    def __init__(self, inbox: trio.MemorySendChannel[ModelMessage], info: ModelInfo,
                 tokenizer: Any, serving: trio.Event | None = None):
        """`serving`: set once the engine's weights are loaded and it steps (None: at
        once); requests may render, and submit to wait in the queue, before."""
        self._inbox = inbox
        self.info = info
        self.tokenizer = tokenizer
        self._serving = serving
        self._render_limiter = trio.CapacityLimiter(2)
        self._large_render_limiter = trio.CapacityLimiter(1)   # see LARGE_RENDER_CHARS

    async def render(self, messages: list[dict[str, Any]],
                     tools: list[dict[str, Any]] | None = None,
                     template_kwargs: dict[str, Any] | None = None, *, submits: bool = True
                     ) -> Rendered:
        """Renders and tokenizes a chat in a worker thread. `submits=False` says no Submit
        follows (counting tokens only), so the actor does not hold Inserts waiting for it.
        The model's family decides what the template is given (`Family.present`: the
        generic envelope writes the tools into the messages) and how it renders
        (`Family.render`: roles the template refuses are merged as docs/models.md says)."""
        family = self.info.family
        kwargs = template_kwargs or {}

        def apply(fitted: list[dict[str, Any]], shown_tools: Any) -> str:
            text: str = self.tokenizer.apply_chat_template(
                fitted, tools=shown_tools or None, add_generation_prompt=True,
                tokenize=False, **kwargs)
            return text

        def work() -> Rendered:
            shown, shown_tools = family.present(messages, tools)
            try:
                text = family.render(apply, shown, shown_tools, self.info.template_roles,
                                     kwargs)
            except Exception as exc:  # a template error is the request's, not the server's
                raise InvalidRequest(f"the chat template could not render this input: {exc}",
                                     param="input", code="invalid_prompt") from None
            tokens = self.tokenizer.encode(text, add_special_tokens=False)
            images = message_images(shown)
            if not images:
                return Rendered(tokens, text)
            prompter = prompter_of(self.tokenizer)
            if prompter is None:   # the media step refuses images for a text model first
                raise InvalidRequest("this model does not take image input", param="input")
            tokens, spans = prompter.expand(tokens, images, text)
            return Rendered(tokens, text, spans)

        return await self._rendering(
            work, large=text_size(messages) + text_size(tools) > LARGE_RENDER_CHARS,
            submits=submits)

    async def tokenize(self, prompt: str | list[int], *, submits: bool = True) -> Rendered:
        """A raw prompt (`POST /v1/completions`): its text tokenized as the tokenizer does
        by default (its BOS included), no chat template; token ids are taken as they are
        (an id outside the vocabulary is a 400)."""
        vocab = self.info.vocab_size

        def work() -> Rendered:
            if isinstance(prompt, str):
                return Rendered(list(self.tokenizer.encode(prompt)), prompt)
            bad = next((t for t in prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise InvalidRequest(f"token id {bad} is outside the model's vocabulary "
                                     f"(0-{vocab - 1})", param="prompt")
            return Rendered(list(prompt), self.tokenizer.decode(prompt))

        return await self._rendering(work, large=text_size(prompt) > LARGE_RENDER_CHARS,
                                     submits=submits)

    async def _rendering(self, work: Callable[[], Rendered], *, large: bool, submits: bool
                         ) -> Rendered:
        """`work` in a worker thread, the actor told when it starts and ends (it holds the
        batch's Inserts for a Submit that is about to follow)."""
        await self._inbox.send(Rendering(started=True))
        submitting = False
        try:
            rendered = await trio.to_thread.run_sync(
                work, limiter=self._large_render_limiter if large else self._render_limiter)
            submitting = submits  # its Submit follows (unless the request fails first)
        finally:
            with trio.CancelScope(shield=True):  # the actor must hear of every render's end
                await self._inbox.send(Rendering(started=False, submits=submitting))
        return rendered

    @asynccontextmanager
    async def generate(self, request: GenerationRequest) -> AsyncIterator[Admission]:
        """Holds a slot (or a place in the queue) for the duration of the block."""
        admission: Admission = await ask(self._inbox, lambda r: Submit(request, r))
        try:
            yield admission
        finally:
            with trio.move_on_after(RELEASE_TIMEOUT, shield=True):
                await self._inbox.send(Release(admission.uid))

    async def statistics(self) -> ModelStatistics:
        return await ask(self._inbox, ModelStatisticsRequest)

    async def serving(self) -> None:
        """Returns once the engine serves (its weights are loaded)."""
        if self._serving is not None:
            await self._serving.wait()


def text_size(value: Any) -> int:
    """The characters of every string in a JSON-like value (keys included): what a chat
    template will have to render and tokenize, without building any of it."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(len(k) + text_size(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(text_size(v) for v in value)
    return 0


@attrs.define
class _Request:
    uid: int
    request: GenerationRequest
    outputs: trio.MemorySendChannel[StepOutput]
    submitted: float                  # trio.current_time() at its Submit
    first_token: float | None = None
    tokens: int = 0


def idle_statistics(parallel: int = 0, max_queue: int = 0) -> ModelStatistics:
    """The statistics of a model actor that has done nothing (a model not loaded)."""
    empty = Histogram(()).statistics()
    return ModelStatistics(
        slots_total=parallel, slots_busy=0, queue_depth=0, queue_max=max_queue,
        engine_alive=False, engine_restarts=0, engine_error=None, steps=0,
        tokens_generated=0, requests_admitted=0, requests_rejected=0, rendering=0,
        prompt_cache=PromptCacheStatistics(max_bytes=0, entries=0, bytes=0, hits=0,
                                           cached_tokens=0),
        generation=GenerationStatistics(
            started=0, prompt_tokens=0, outcomes=dict.fromkeys(OUTCOMES, 0),
            queue_wait=empty, time_to_first_token=empty, time_per_output_token=empty,
            duration=empty))


class ModelActor:
    def __init__(self, engine: EngineOptions, *, host: EngineHost | None = None,
                 max_queue: int,
                 engine_factory: Callable[[EngineOptions], SteppedEngine] = Engine,
                 stream_buffer: int = STREAM_BUFFER_STEPS,
                 group: GroupFailure | None = None):
        """`engine`: every engine knob, handed whole to each engine this actor starts
        (`engine_factory`: a test's fake engine). `host`: the process's one engine thread,
        which steps this actor's engine among the other models' (None: a host of its own,
        started with the actor: a model actor alone, in tools and tests). `group`: under
        --distributed, where a failure of the group of ranks is reported."""
        self._options = engine
        self._own_host = host is None
        self._host = host or EngineHost()
        self._new_engine: Callable[[], SteppedEngine] = functools.partial(engine_factory,
                                                                          engine)
        # Speculation's figures: the running engine's latest report, and those of engines
        # that died (an engine counts from its start).
        self._speculation: SpeculationStatistics | None = None
        self._speculation_before = SpeculationStatistics()
        self._max_queue = max_queue
        self._group = group if engine.distributed != "off" else None
        self._ranks: tuple[RankFigures, ...] = ()   # every rank's figures, last gathered
        # The watchdog's clock (time.monotonic): the last step (set in the host thread) and
        # when requests last started running on an idle engine.
        self._last_step = 0.0
        self._busy_since = 0.0
        self._stream_buffer = stream_buffer
        self._next_uid = 0
        self._active: dict[int, _Request] = {}
        self._waiting: deque[_Request] = deque()
        self._pending: list[Command] = []
        # The hand-off to the engine host: commands the engine has not taken yet, its stop
        # flag, and where its steps are posted (in the trio thread, in order).
        self._link = self._host.link(self._post)
        self._token: trio.lowlevel.TrioToken | None = None
        self._serving = trio.Event()    # the first engine's first step came
        self._stepped = False           # the running engine's first step came (host thread)
        self._arrivals = Arrivals()
        self._nursery: trio.Nursery | None = None
        self._hold: trio.CancelScope | None = None  # the deadline of held Inserts, if any
        self._engine_alive = False
        self._engine_gone: str | None = None   # set when restarting was given up
        self._restarts = 0
        self._engine_error: str | None = None
        self._step_failure: Exception | None = None   # why the running engine is being stopped
        self._steps = 0
        self._tokens = 0
        self._admitted = 0
        self._rejected = 0
        self._prompt_cache: CacheFigures | None = None   # as the engine last reported
        self._prompt_cache_hits = 0
        self._prompt_cache_tokens = 0
        self._started = 0
        self._prompt_tokens = 0
        self._outcomes = dict.fromkeys(OUTCOMES, 0)
        self._queue_wait = Histogram(WAIT_BUCKETS)
        self._first_token = Histogram(WAIT_BUCKETS)
        self._per_token = Histogram(TOKEN_BUCKETS)
        self._duration = Histogram(DURATION_BUCKETS)

    async def run(self, *, task_status: trio.TaskStatus[ModelHandle] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        send, inbox = trio.open_memory_channel[ModelMessage](INBOX_SIZE)
        async with trio.open_nursery() as outer:
            if self._own_host:
                await outer.start(self._host.run)
            await self._serve(send, inbox, task_status)
            outer.cancel_scope.cancel()

    async def _serve(self, send: trio.MemorySendChannel[ModelMessage],
                     inbox: trio.MemoryReceiveChannel[ModelMessage],
                     task_status: trio.TaskStatus[ModelHandle]) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            info, tokenizer = await nursery.start(self._run_engine, send)
            if self._group is not None:
                nursery.start_soon(self._watchdog)
            task_status.started(ModelHandle(send, info, tokenizer, self._serving))
            with inbox:   # once the actor ends (its model unloads), asking it fails at once
                await self._handle_messages(inbox)

    async def _handle_messages(self, inbox: trio.MemoryReceiveChannel[ModelMessage]) -> None:
        async for msg in inbox:
            match msg:
                case Submit():
                    answer(msg.reply, lambda: self._submit(msg))
                case Release(uid=uid):
                    self._release(uid)
                case Rendering(started=True):
                    self._arrivals.rendering += 1
                case Rendering(submits=submits):
                    self._arrivals.rendering -= 1
                    self._arrivals.rendered += submits
                    if not self._arrivals.expected:
                        self._flush()  # nobody else is coming: release held Inserts
                case ModelStatisticsRequest(reply=reply):
                    answer(reply, self._statistics)

    async def _run_engine(self, inbox: trio.MemorySendChannel[ModelMessage], *,
                          task_status: trio.TaskStatus[tuple[ModelInfo, Any]]) -> None:
        """Runs the engine thread; starts a fresh one when it dies after a successful load.

        The engine's callbacks (`started`, the posted `_guarded_step`) and this task's
        reaction to its death run in the trio thread and never await, like the actor loop:
        the actor's state has one thread, and an engine's outputs are never processed before
        the actor knows that engine is alive. A failed step stops its engine through
        the link's stop and is then handled here as that engine's death."""
        self._token = trio.lowlevel.current_trio_token()
        link = self._link
        loaded = False

        def started(info: ModelInfo, tokenizer: Any) -> None:
            nonlocal loaded
            # (the host thread may be a daemon thread of its own: EngineHost.abandon_after)
            trio.from_thread.run_sync(self._engine_started, trio_token=self._token)
            if not loaded:  # the first load hands out the handle; a restart only says so
                loaded = True
                trio.from_thread.run_sync(task_status.started, (info, tokenizer),
                                          trio_token=self._token)

        async def stop_on_cancel() -> None:
            try:
                await trio.sleep_forever()
            finally:  # cancelled (shutdown, unload) or the engine ended: the host closes it
                link.stop()

        deaths: deque[float] = deque()
        while True:
            link.reset()
            self._stepped = False
            self._step_failure = None
            died: Exception | None = None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop_on_cancel)
                try:
                    await self._host.run_engine(self._new_engine(), link, started)
                except EngineStopping:
                    died = self._step_failure  # or the enclosing scope was cancelled (shutdown)
                except Exception as exc:
                    died = exc
                finally:
                    nursery.cancel_scope.cancel()
            if died is None:
                return  # the Cancelled of the enclosing scope follows
            if self._group is not None and self._serving.is_set():
                # A rank's engine cannot be replaced alone: the group has failed.
                self._fail_group(f"{type(died).__name__}: {died}")
                return
            if not self._serving.is_set():
                # Failed while loading the first time (its weights, or before): the model
                # cannot serve; requests that waited for it end.
                self._engine_stopped(died)
                raise died
            if died is self._step_failure:
                log.error("handling an engine step failed; replacing the engine", exc_info=died)
            else:
                log.error("engine thread died", exc_info=died)
            now = trio.current_time()
            deaths.append(now)
            while deaths and deaths[0] < now - RESTART_WINDOW:
                deaths.popleft()
            if len(deaths) > MAX_RESTARTS:
                log.error("the engine died %d times in %.0f s; not restarting it",
                          len(deaths), RESTART_WINDOW)
                self._engine_gone = f"{type(died).__name__}: {died}"
                self._engine_stopped(died)
                return
            self._engine_stopped(died)
            await trio.sleep(RESTART_DELAY * 2 ** (len(deaths) - 1))
            log.warning("restarting the engine")

    def _post(self, step: Step) -> None:
        """Called in the host thread after each step of this actor's engine: the outputs are
        processed in the trio thread, in order, while MLX computes other steps. A command
        they cause (a cut-off consumer's Remove, a waiter's Insert) is taken at the
        engine's next step."""
        if self._token is None:
            return
        self._last_step = time.monotonic()
        if not self._stepped:
            self._stepped = True
            self._token.run_sync_soon(self._serving.set)
        if step.outputs or step.speculation is not None or step.ranks is not None:
            self._token.run_sync_soon(self._guarded_step, step)

    # ---- state changes (only ever called from the trio thread: the actor loop, or `_step`
    # posted by the engine thread; none of them awaits) -----------------------------------

    def _submit(self, msg: Submit) -> Admission:
        if self._arrivals.rendered:
            self._arrivals.rendered -= 1
        if self._engine_gone is not None:
            if self._group is not None:
                raise ModelUnavailable(f"the model's group of ranks failed "
                                       f"({self._engine_gone}); it is not serving",
                                       retry_after_secs=30)
            raise ServerError(f"the generation engine is not running ({self._engine_gone})")
        if len(self._active) >= self._options.parallel and len(self._waiting) >= self._max_queue:
            self._rejected += 1
            raise Overloaded("the generation queue is full; retry later")
        send, recv = trio.open_memory_channel[StepOutput](self._stream_buffer)
        req = _Request(self._next_uid, msg.request, send, submitted=trio.current_time())
        self._next_uid += 1
        if len(self._active) < self._options.parallel:
            self._admit(req)
        else:
            self._enqueue(req)
        return Admission(req.uid, recv)

    def _enqueue(self, req: _Request) -> None:
        """Higher priority first; arrival order within one priority."""
        after = next((i for i in range(len(self._waiting), 0, -1)
                      if self._waiting[i - 1].request.priority >= req.request.priority), 0)
        self._waiting.insert(after, req)

    def _admit(self, req: _Request) -> None:
        if not self._active:
            self._busy_since = time.monotonic()
        self._active[req.uid] = req
        self._admitted += 1
        self._queue_wait.observe(trio.current_time() - req.submitted)
        self._pending.append(Insert(req.uid, req.request))
        self._flush()

    def _free_slot(self, uid: int) -> None:
        req = self._active.pop(uid)
        req.outputs.close()
        while self._waiting and len(self._active) < self._options.parallel:
            self._admit(self._waiting.popleft())

    def _release(self, uid: int) -> None:
        for req in self._waiting:
            if req.uid == uid:
                self._waiting.remove(req)
                req.outputs.close()
                self._outcomes["released"] += 1
                return
        if uid in self._active:
            self._outcomes["released"] += 1
            unsent = [c for c in self._pending if isinstance(c, Insert) and c.uid == uid]
            if unsent:  # still held here: the engine never sees it
                self._pending.remove(unsent[0])
            else:
                self._pending.append(Remove(uid))
            self._free_slot(uid)
            self._flush()

    def _guarded_step(self, msg: Step) -> None:
        """`_step` behind an error boundary: an exception escaping a `run_sync_soon` callback
        is a TrioInternalError, which ends the process. Instead the failure stops the engine
        at its next exchange (its later steps are dropped meanwhile) and `_run_engine`
        handles it as that engine's death: its requests fail and a fresh engine starts."""
        try:
            self._step(msg)
        except Exception as exc:
            self._engine_alive = False
            self._step_failure = exc
            self._link.stop()

    def _step(self, msg: Step) -> None:
        """One engine step's outputs (run in the trio thread, posted by the engine's exchange)."""
        if not self._engine_alive:
            return  # the engine died after posting these; its requests have been ended
        self._steps += bool(msg.outputs)
        if msg.speculation is not None:
            self._speculation = msg.speculation
        if msg.prompt_cache is not None:
            self._prompt_cache = msg.prompt_cache
        if msg.ranks is not None:
            self._ranks = msg.ranks
        now = trio.current_time()
        for out in msg.outputs:
            req = self._active.get(out.uid)
            if req is None:
                continue  # released while the step ran; its Remove is pending
            self._tokens += 1
            req.tokens += 1
            if req.first_token is None:
                self._first_output(req, out, now)
            try:
                req.outputs.send_nowait(out)
            except (trio.WouldBlock, trio.BrokenResourceError):
                log.warning("request %d: consumer too slow or gone; cutting it off", out.uid)
                if out.finish_reason is None:
                    self._pending.append(Remove(out.uid))
                self._outcomes["cut_off"] += 1
                self._free_slot(out.uid)
                continue
            if out.finish_reason is not None:
                self._finished(req, out, now)
                self._free_slot(out.uid)
        self._flush()

    def _first_output(self, req: _Request, out: StepOutput, now: float) -> None:
        req.first_token = now
        self._first_token.observe(now - req.submitted)
        self._started += 1
        self._prompt_tokens += len(req.request.prompt)
        if out.cached_tokens:   # reported on a sequence's first output only
            self._prompt_cache_hits += 1
            self._prompt_cache_tokens += out.cached_tokens

    def _finished(self, req: _Request, out: StepOutput, now: float) -> None:
        outcome = "error" if out.error else out.finish_reason or "stop"
        self._outcomes[outcome] = self._outcomes.get(outcome, 0) + 1
        self._duration.observe(now - req.submitted)
        if req.tokens > 1 and req.first_token is not None:
            self._per_token.observe((now - req.first_token) / (req.tokens - 1))

    def _flush(self, *, force: bool = False) -> None:
        """Hands the pending commands to the engine thread (waking it if it is parked).

        Inserts are held back while other requests' chat templates are being rendered: those
        requests Submit within milliseconds, and sequences inserted together are prefilled as
        one batch, where one at a time each would wait for the previous one's prefill. The
        hold ends when no request is expected any more (at a Submit or a render's end), or
        after ADMISSION_HOLD_MAX; a request that arrives alone is never held."""
        if not self._pending:
            return
        commands = self._pending
        if not force and self._arrivals.expected and self._nursery is not None:
            commands = [c for c in self._pending if not isinstance(c, Insert)]
            if len(commands) < len(self._pending) and self._hold is None:
                self._hold = trio.CancelScope(deadline=trio.current_time() + ADMISSION_HOLD_MAX)
                self._nursery.start_soon(self._end_hold, self._hold)
        if self._hold is not None and len(commands) == len(self._pending):
            self._hold.cancel()  # nothing held any more
            self._hold = None
        if commands is self._pending:
            self._pending = []
        else:
            self._pending = [c for c in self._pending if isinstance(c, Insert)]
        if commands:
            self._link.hand(commands)

    async def _end_hold(self, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep_forever()
        if self._hold is scope:  # the deadline passed with Inserts still held
            self._hold = None
            self._arrivals.rendered = 0  # a rendered request that failed never Submits
            self._flush(force=True)

    async def _watchdog(self) -> None:
        """--distributed: a step must complete within --distributed-watchdog seconds while
        requests run. A rank that stalls (or a link that hangs) holds every rank inside a
        collective, where nothing returns or raises: this is how it is noticed."""
        limit = self._options.watchdog
        while self._engine_gone is None:
            await trio.sleep(WATCHDOG_POLL)
            if not self._active or not self._engine_alive:
                continue
            quiet = time.monotonic() - max(self._last_step, self._busy_since)
            if quiet > limit:
                self._fail_group(f"no engine step completed in {quiet:.0f} s "
                                 f"(--distributed-watchdog {limit:g}) with {len(self._active)} "
                                 "requests running: a rank stalled or its link hangs")

    def _fail_group(self, reason: str) -> None:
        """The group of ranks is dead: requests end, new ones are refused, the CLI is told.
        A step that still completes later is dropped (the engine counts as dead)."""
        assert self._group is not None
        if self._group.reason is not None:
            return   # failed already (the watchdog, then the hung step's own error)
        log.error("--distributed: the group failed: %s", reason)
        self._engine_gone = reason
        self._engine_stopped(RuntimeError(reason))
        self._link.stop()
        self._group.fail(reason)

    def _engine_started(self) -> None:
        self._restarts += self._engine_error is not None
        self._engine_alive = True

    def _engine_stopped(self, error: BaseException) -> None:
        """Ends every held request's output without a finish reason: their responses fail."""
        self._engine_alive = False
        self._engine_error = f"{type(error).__name__}: {error}"
        if self._speculation is not None:   # the dead engine's figures still count
            self._speculation_before = self._speculation_before + self._speculation
            self._speculation = None
        if self._prompt_cache is not None:   # memory died with the engine; the disk stays
            self._prompt_cache = CacheFigures(0, 0, self._prompt_cache.disk)
        for req in [*self._active.values(), *self._waiting]:
            req.outputs.close()
            self._outcomes["engine_failed"] += 1
        self._active.clear()
        self._waiting.clear()
        self._pending.clear()
        self._link.clear()

    def _prompt_cache_statistics(self) -> PromptCacheStatistics:
        figures = self._prompt_cache or CacheFigures(0, 0)
        disk = figures.disk
        return PromptCacheStatistics(
            max_bytes=self._options.prompt_cache_bytes, entries=figures.entries,
            bytes=figures.nbytes,
            hits=self._prompt_cache_hits, cached_tokens=self._prompt_cache_tokens,
            **({} if disk is None else {
                "disk_max_bytes": disk.max_bytes, "disk_entries": disk.entries,
                "disk_bytes": disk.bytes, "disk_hits": disk.hits, "disk_writes": disk.writes,
                "disk_write_errors": disk.write_errors, "disk_skipped": disk.skipped}))

    def _statistics(self) -> ModelStatistics:
        return ModelStatistics(
            slots_total=self._options.parallel, slots_busy=len(self._active),
            queue_depth=len(self._waiting), queue_max=self._max_queue,
            engine_alive=self._engine_alive, engine_restarts=self._restarts,
            engine_error=self._engine_error, steps=self._steps, tokens_generated=self._tokens,
            requests_admitted=self._admitted, requests_rejected=self._rejected,
            rendering=self._arrivals.rendering,
            prompt_cache=self._prompt_cache_statistics(),
            generation=GenerationStatistics(
                started=self._started, prompt_tokens=self._prompt_tokens,
                outcomes=dict(self._outcomes), queue_wait=self._queue_wait.statistics(),
                time_to_first_token=self._first_token.statistics(),
                time_per_output_token=self._per_token.statistics(),
                duration=self._duration.statistics()),
            speculation=self._speculation_statistics(),
            distributed=None if self._group is None else DistributedStatistics(
                self._options.distributed, self._ranks, self._group.reason))

    def _speculation_statistics(self) -> SpeculationStatistics | None:
        """None with speculation off."""
        if self._options.speculative == "off":
            return None
        if self._speculation is None:
            return self._speculation_before
        return self._speculation_before + self._speculation
