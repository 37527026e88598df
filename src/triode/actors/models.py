"""The models registry: which models are loaded, and who is using them.

One actor owns every available model's state (`unloaded`, `loading`, `loaded`, `unloading`,
`failed`), its leases and its memory. A request asks it for a lease on its model
(`ModelsHandle.acquire`): a loaded model's handle comes back at once; an unloaded one is
loaded first (the request waits, up to --load-timeout) by a model actor of its own, started
under this actor (`_serve`), whose engine the one engine host steps beside the others'.

Never unloaded: a model that is loading, that has a lease (its requests running or queued,
from acquire to release), or whose load a request still waits for (the waiter becomes a
lease in the same step as the load completes, so no eviction can come between). Before a
load, idle unpinned models are unloaded in LRU order until the new one fits
--max-loaded-models and --max-model-memory (what the loaded ones measured, or, before a
model has loaded once, its weight files plus its KV and prompt-cache budgets); when nothing
can go, the request is a 503 with Retry-After naming why. An idle model unloads after its
keep-alive (the last request's `keep_alive`, else its own, else --keep-alive): 0 at once,
-1 never. A model that fails to load is `failed` with a one-line reason, its waiters get
that error, and the next request for it tries again.

The actor's child tasks (`_serve`, one per loaded model) run in its nursery and change its
state through its methods, in the trio thread, without awaiting in between (one owner).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from typing import Any, Callable

import attrs
import outcome
import trio

from ..errors import (APIError, InvalidRequest, ModelBusy, ModelLoadFailed, ModelNotFound,
                      ModelNotLoaded, ModelUnavailable, NotFound)
from ..model import memory
from ..model.catalog import ModelSpec, kv_budget, weight_bytes
from ..model.engine import EngineOptions
from ..model.loading import ModelInfo, load_failure, prefetch
from ..tenants import Caller
from .host import EngineHost
from .mailbox import ReplyChannel, answer, ask, reply_with
from .model import ModelActor, ModelHandle
from .messages import ModelStatistics

log = logging.getLogger(__name__)

INBOX_SIZE = 1024
RELEASE_TIMEOUT = 5.0
LOAD_PROGRESS_SECS = 5.0   # a slow model load says it is still loading this often
RETRY_AFTER_BUSY = 5     # seconds a 503 for a model that cannot be made room for suggests


@attrs.frozen
class ModelView:
    """One model as GET /v1/models, /health, /metrics and /ui show it."""

    spec: ModelSpec
    status: str
    error: str | None           # why it failed (one line), when `failed`
    memory_bytes: int           # its weights: measured at its last load (MLX's counter),
                                # else its weight files' size
    measured: bool              # memory_bytes was measured, not estimated
    reserved_bytes: int         # what admission counts: memory_bytes plus its KV-cache and
                                # prompt-cache budgets
    leases: int                 # requests holding it (running or queued)
    waiting: int                # requests waiting for its load
    loads: int                  # loads started
    load_seconds: float | None  # the last load's duration
    loaded_at: float | None     # wall-clock time of the last load's end
    idle_seconds: float | None  # since its last lease ended (None: in use, or not loaded)
    expires_at: float | None    # wall-clock time it unloads if still idle; None: never/now
    keep_alive: float           # seconds (-1: never)
    info: ModelInfo | None = None               # what loaded, when loaded
    statistics: ModelStatistics | None = None   # its model actor's, when loaded

    @property
    def context_window(self) -> int | None:
        return self.info.context_length if self.info is not None \
            else self.spec.context_length


class Lease:
    """A request's hold on a loaded model: `handle` is its model actor's. Released once,
    by `release` (a supervisor's end, or the create that failed before one started)."""

    def __init__(self, uid: int, handle: ModelHandle, spec: ModelSpec,
                 inbox: trio.MemorySendChannel[Any]):
        self.uid = uid
        self.handle = handle
        self.spec = spec
        self._inbox = inbox
        self._released = False

    async def release(self) -> None:
        if self._released:
            return
        self._released = True
        with trio.move_on_after(RELEASE_TIMEOUT, shield=True):
            await self._inbox.send(_Release(self.uid))


@attrs.frozen
class _Acquire:
    spec_id: str
    keep_alive: float | None
    autoload: bool | None   # None: as the server says (--no-autoload); True: load it anyway
    reply: ReplyChannel[tuple[int, trio.MemoryReceiveChannel[outcome.Outcome[ModelHandle]]]]
    early: bool = False     # answered once the tokenizer is ready (the weights may follow)


@attrs.frozen
class _Release:
    uid: int


@attrs.frozen
class _Unload:
    spec_id: str
    reply: ReplyChannel[Any]


@attrs.frozen
class _Views:
    reply: ReplyChannel[list[tuple[str, str, ModelHandle | None, ModelView]]]


@attrs.define(eq=False)
class _Model:
    spec: ModelSpec
    weight_files: int                      # its weights' bytes on disk (before a load)
    budget: int                            # its KV cache and prompt-cache budgets
    status: str = "unloaded"
    error: str | None = None
    handle: ModelHandle | None = None
    scope: trio.CancelScope | None = None  # its model actor's, while loading or loaded
    leases: set[int] = attrs.Factory(set)
    waiters: dict[int, trio.MemorySendChannel[outcome.Outcome[ModelHandle]]] = \
        attrs.Factory(dict)
    keep_alives: dict[int, float] = attrs.Factory(dict)   # each waiter's request's
    early: set[int] = attrs.Factory(set)   # waiters answered once the tokenizer is ready
    measured: int | None = None            # bytes its last load took (MLX's counter)
    loads: int = 0
    load_began: float | None = None
    load_seconds: float | None = None
    loaded_at: float | None = None         # wall clock
    last_used: float = 0.0                 # trio time its last lease ended (LRU order)
    keep_alive: float = 0.0                # of its last request (else its own)
    expires: float | None = None           # trio time it unloads if still idle
    unload_reason: str | None = None
    pending: bool = False                  # loading, but waiting for unloads to finish
    unloaded_replies: list[ReplyChannel[Any]] = attrs.Factory(list)   # told at the end
    exception: BaseException | None = None   # what its last failed load raised

    @property
    def weights(self) -> int:
        """Its weights' memory: as its last load measured it, else its files' size."""
        return self.measured if self.measured is not None else self.weight_files

    @property
    def bytes(self) -> int:
        """What admission counts: its weights plus its KV and prompt-cache budgets."""
        return self.weights + self.budget

    @property
    def busy(self) -> bool:
        return bool(self.leases or self.waiters)


class ModelsRegistry:
    def __init__(self, specs: tuple[ModelSpec, ...], *, host: EngineHost,
                 engine_options: Callable[[ModelSpec], EngineOptions], max_queue: int,
                 max_loaded_models: int = 0, max_model_memory: int = 0,
                 autoload: bool = True,
                 actor_factory: Callable[[EngineOptions, EngineHost, int], ModelActor]
                 | None = None):
        """`engine_options`: a model's engine knobs from its spec and the settings.
        `max_model_memory` 0: what the device has (model/memory.py). `actor_factory`: a
        test's model actors (fake engines)."""
        self._models = {s.id: _Model(s, weight_bytes(s), budget(s, engine_options(s)),
                                     keep_alive=s.keep_alive) for s in specs}
        self._specs = specs
        self._host = host
        self._engine_options = engine_options
        self._max_queue = max_queue
        self._max_loaded = max_loaded_models
        self._max_memory = max_model_memory
        self._autoload = autoload
        self._actor_factory = actor_factory or (
            lambda options, host, max_queue: ModelActor(options, host=host,
                                                        max_queue=max_queue))
        self._uids = itertools.count(1)
        self._leases: dict[int, tuple[_Model, float]] = {}   # uid -> (model, keep-alive)
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[ModelsHandle] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        if not self._max_memory:
            self._max_memory = await trio.to_thread.run_sync(memory.device_bytes)
        send, inbox = trio.open_memory_channel[Any](INBOX_SIZE)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            first = next((m for m in self._models.values() if m.spec.preload), None)
            if first is not None:   # today's start: the first --model, loaded before serving
                await self._preload(first)
            task_status.started(ModelsHandle(send, self._specs))
            while True:
                with trio.move_on_at(self._next_expiry()):
                    msg = await inbox.receive()
                    self._handle(msg)
                self._expire()

    async def _preload(self, model: _Model) -> None:
        """Loads the first model before the server answers; a failure is the SettingsError
        naming --model that a server which cannot load its model stops with."""
        send, recv = trio.open_memory_channel[outcome.Outcome[ModelHandle]](1)
        uid = next(self._uids)
        model.waiters[uid] = send
        self._load(model)
        async with recv:
            result = await recv.receive()
        if isinstance(result, outcome.Error):
            raise load_failure(model.spec.source, model.exception or result.error)
        self._release(uid)

    # ---- messages -------------------------------------------------------------------------

    def _handle(self, msg: Any) -> None:
        match msg:
            case _Acquire():
                answer(msg.reply, lambda: self._acquire(msg))
            case _Release(uid=uid):
                self._release(uid)
            case _Unload():
                try:
                    self._unload_by_request(msg.spec_id, msg.reply)
                except APIError as exc:
                    reply_with(msg.reply, outcome.Error(exc))
            case _Views(reply=reply):
                answer(reply, self._views)

    def _acquire(self, msg: _Acquire
                 ) -> tuple[int, trio.MemoryReceiveChannel[outcome.Outcome[ModelHandle]]]:
        model = self._models[msg.spec_id]
        uid = next(self._uids)
        send, recv = trio.open_memory_channel[outcome.Outcome[ModelHandle]](1)
        keep = model.spec.keep_alive if msg.keep_alive is None else msg.keep_alive
        model.keep_alives[uid] = keep
        if model.status == "loaded" or (msg.early and model.status == "loading"
                                        and model.handle is not None):
            assert model.handle is not None
            self._lease(model, uid)
            send.send_nowait(outcome.Value(model.handle))
            return uid, recv
        autoload = self._autoload if msg.autoload is None else msg.autoload
        if model.status in ("unloaded", "failed") and not autoload:
            raise ModelNotLoaded(f"model '{model.spec.id}' is not loaded (the server runs "
                                 "with --no-autoload; POST /v1/models/"
                                 f"{model.spec.id}/load loads it)", param="model")
        model.waiters[uid] = send
        if msg.early:
            model.early.add(uid)
        if model.status in ("unloaded", "failed"):
            self._load(model)
        # loading: it joins the waiters; unloading: it loads again once the unload is done
        return uid, recv

    def _lease(self, model: _Model, uid: int) -> None:
        model.leases.add(uid)
        model.expires = None
        self._leases[uid] = (model, model.keep_alives.pop(uid, model.spec.keep_alive))

    def _release(self, uid: int) -> None:
        leased = self._leases.pop(uid, None)
        if leased is not None:
            model: _Model = leased[0]
            model.keep_alive = leased[1]   # the last request's keep-alive rules
            model.leases.discard(uid)
            self._left(model)
            return
        for model in self._models.values():
            model.keep_alives.pop(uid, None)
            model.early.discard(uid)
            if model.waiters.pop(uid, None) is not None:
                self._left(model)
                return

    def _left(self, model: _Model) -> None:
        """A lease or a waiter of `model` is gone: a load nobody waits for any more is
        cancelled; a loaded model left idle starts its keep-alive."""
        if model.busy:
            return
        if model.status == "loading":
            log.info("model %s: nobody waits for its load any more; cancelled", model.spec.id)
            self._stop(model, "its load was cancelled")
        else:
            self._idle(model)

    def _idle(self, model: _Model) -> None:
        """Its last lease ended: it unloads after its keep-alive."""
        model.last_used = trio.current_time()
        keep = model.keep_alive
        if model.spec.pinned or keep < 0 or model.status != "loaded":
            model.expires = None
        elif keep == 0:
            self._stop(model, "keep-alive 0: unloaded after its request")
        else:
            model.expires = model.last_used + keep

    def _next_expiry(self) -> float:
        return min((m.expires for m in self._models.values() if m.expires is not None),
                   default=math.inf)

    def _expire(self) -> None:
        now = trio.current_time()
        for model in self._models.values():
            if model.expires is not None and model.expires <= now and not model.busy \
                    and model.status == "loaded":
                    self._stop(model, f"idle for {model.keep_alive:g} s")

    def _unload_by_request(self, spec_id: str, reply: ReplyChannel[Any]) -> None:
        """Unloads an idle model; `reply` is answered once it has (its memory is back)."""
        model = self._models[spec_id]
        if self._engine_options(model.spec).distributed != "off":
            raise InvalidRequest(f"model '{spec_id}' is sharded over a group of ranks "
                                 "(--distributed); it stays loaded while the server runs",
                                 param="model")
        if model.busy:
            raise ModelBusy(f"model '{spec_id}' is in use ({len(model.leases)} request(s) "
                            f"running or queued, {len(model.waiters)} waiting for its load); "
                            "it unloads once idle only by its keep-alive", param="model")
        if model.status in ("loading", "loaded"):
            self._stop(model, "unloaded on request")
        if model.status == "unloading":
            model.unloaded_replies.append(reply)
        else:
            reply_with(reply, outcome.Value(None))

    # ---- loading and unloading ------------------------------------------------------------

    def _load(self, model: _Model) -> None:
        """Makes room (unloading idle models, LRU first) and starts the load; when there is
        no room, every waiter gets a 503."""
        why = self._make_room(model)
        if why is not None:
            self._fail_waiters(model, ModelUnavailable(why, retry_after_secs=RETRY_AFTER_BUSY))
            return
        model.status = "loading"
        model.error = None
        model.expires = None
        model.loads += 1
        model.load_began = trio.current_time()
        model.scope = trio.CancelScope()
        model.pending = True
        if not any(m.status == "unloading" for m in self._models.values()):
            self._start(model)
        # else it starts once the unloads that make its room are done (`_unloaded`)

    def _start(self, model: _Model) -> None:
        assert self._nursery is not None and model.scope is not None
        model.pending = False
        self._nursery.start_soon(self._serve, model, model.scope)

    def _make_room(self, model: _Model) -> str | None:
        """Unloads idle unpinned models, least recently used first, until `model` fits;
        returns why it cannot fit, or None."""
        while True:   # (models already unloading are on their way out: not counted)
            others = [m for m in self._models.values()
                      if m is not model and m.status in ("loading", "loaded")]
            count_over = self._max_loaded and len(others) + 1 > self._max_loaded
            used = sum(m.bytes for m in others)
            memory_over = used + model.bytes > self._max_memory
            if not count_over and not memory_over:
                return None
            idle = sorted((m for m in others if m.status == "loaded" and not m.busy
                           and not m.spec.pinned), key=lambda m: m.last_used)
            if not idle:
                if count_over:
                    return (f"model '{model.spec.id}' cannot be loaded now: "
                            f"--max-loaded-models {self._max_loaded} models are loaded and "
                            "none of them can be unloaded (each is in use, loading or "
                            "pinned)")
                return (f"model '{model.spec.id}' cannot be loaded now: it needs about "
                        f"{model.bytes} bytes and {max(0, self._max_memory - used)} of "
                        f"--max-model-memory {self._max_memory} are free; the loaded "
                        "models are in use, loading or pinned")
            victim = idle[0]
            log.info("model %s: unloaded to make room for %s (least recently used)",
                     victim.spec.id, model.spec.id)
            self._stop(victim, f"unloaded to make room for {model.spec.id}")

    def _stop(self, model: _Model, reason: str) -> None:
        """Unloads `model` (or cancels its load): its actor's scope is cancelled; `_serve`
        reports the end."""
        model.expires = None
        model.unload_reason = reason
        if model.scope is not None and not model.pending:
            model.status = "unloading"
            model.scope.cancel()
        else:   # not started yet (waiting for other unloads): nothing to stop
            model.status, model.scope, model.pending = "unloaded", None, False

    def _fail_waiters(self, model: _Model, error: Exception) -> None:
        for send in model.waiters.values():
            with send:
                send.send_nowait(outcome.Error(error))
        model.waiters.clear()

    async def _serve(self, model: _Model, scope: trio.CancelScope) -> None:
        """One model's actor, from its load to its unload."""
        spec = model.spec
        before = await trio.to_thread.run_sync(memory.active_bytes)
        log.info("loading model %s (%s)", spec.id, spec.path)
        failure: str | None = None
        assert self._nursery is not None
        progress: trio.CancelScope = await self._nursery.start(report_progress, spec.id)
        with scope:
            try:
                # The MLX-free part of the load (a GGUF's metadata and tokenizer) runs in a
                # worker thread: the engine thread serves the other models meanwhile.
                await trio.to_thread.run_sync(prefetch, spec.path)
                async with trio.open_nursery() as nursery:
                    handle: ModelHandle = await nursery.start(self._actor_factory(
                        self._engine_options(spec), self._host, self._max_queue).run)
                    self._tokenizer_ready(model, handle)
                    await handle.serving()   # its weights are in memory
                    progress.cancel()
                    measured = max(0, await trio.to_thread.run_sync(memory.active_bytes)
                                   - before)
                    self._loaded(model, handle, measured)
                    await trio.sleep_forever()
            except Exception as exc:
                failure = one_line(exc)
                model.exception = exc
                log.error("model %s failed to load: %s", spec.id, failure)
                log.debug("model %s: load failure", spec.id, exc_info=exc)
            finally:
                progress.cancel()
        self._unloaded(model, failure)

    def _tokenizer_ready(self, model: _Model, handle: ModelHandle) -> None:
        """Its configuration and tokenizer are read, its weights not yet: the requests that
        may wait for the weights in its queue (streams and background jobs, which answer at
        once) get their leases now; the others wait for `_loaded`."""
        model.handle = handle
        for uid in [u for u in model.waiters if u in model.early]:
            self._hand_over(model, uid, handle)

    def _hand_over(self, model: _Model, uid: int, handle: ModelHandle) -> None:
        """A waiter becomes a lease, in the same step as it is answered."""
        send = model.waiters.pop(uid)
        model.early.discard(uid)
        self._lease(model, uid)
        with send:
            try:
                send.send_nowait(outcome.Value(handle))
            except (trio.BrokenResourceError, trio.WouldBlock):
                pass   # its caller went away; its release follows

    def _loaded(self, model: _Model, handle: ModelHandle, measured: int) -> None:
        model.status = "loaded"
        model.handle = handle
        model.measured = measured or model.measured
        model.loaded_at = time.time()
        model.load_seconds = trio.current_time() - (model.load_began or trio.current_time())
        model.last_used = trio.current_time()
        describe_loaded(model.spec, handle, model.load_seconds, measured)
        for uid in list(model.waiters):   # leases in this same step: no eviction between
            self._hand_over(model, uid, handle)
        if not model.busy:
            self._idle(model)   # loaded on request (the admin route), or all waiters left

    def _unloaded(self, model: _Model, failure: str | None) -> None:
        """Its actor ended: a failed load, an unload, a cancelled load."""
        model.handle = None
        model.scope = None
        for uid in model.leases:   # only an engine that gave up ends while leased
            self._leases.pop(uid, None)
        model.leases.clear()
        if failure is not None:
            model.status, model.error = "failed", failure
            self._fail_waiters(model, ModelLoadFailed(
                f"model '{model.spec.id}' failed to load: {failure}", param="model"))
        else:
            model.status = "unloaded"
            log.info("model %s unloaded (%s)", model.spec.id, model.unload_reason)
        replies, model.unloaded_replies = model.unloaded_replies, []
        for reply in replies:
            reply_with(reply, outcome.Value(None))
        # Loads that waited for unloads to finish start now; a model that requests came for
        # while it unloaded loads again.
        if not any(m.status == "unloading" for m in self._models.values()):
            for other in self._models.values():
                if other.status == "loading" and other.pending:
                    self._start(other)
        if model.status == "unloaded" and model.waiters:
            self._load(model)

    # ---- views ----------------------------------------------------------------------------

    def _views(self) -> list[tuple[str, str, ModelHandle | None, ModelView]]:
        now, wall = trio.current_time(), time.time()
        views = []
        for m in self._models.values():
            idle = now - m.last_used if m.status == "loaded" and not m.busy else None
            handle = m.handle if m.status == "loaded" else None
            views.append((m.spec.id, m.status, handle, ModelView(
                spec=m.spec, status=m.status, error=m.error, memory_bytes=m.weights,
                measured=m.measured is not None, reserved_bytes=m.bytes,
                leases=len(m.leases),
                waiting=len(m.waiters), loads=m.loads, load_seconds=m.load_seconds,
                loaded_at=m.loaded_at, idle_seconds=idle,
                expires_at=None if m.expires is None else wall + (m.expires - now),
                keep_alive=-1.0 if m.spec.pinned else m.keep_alive)))
        return views


async def report_progress(name: str, *,
                          task_status: trio.TaskStatus[trio.CancelScope]) -> None:
    """Says every LOAD_PROGRESS_SECS that a slow load is still going."""
    began = trio.current_time()
    with trio.CancelScope() as scope:
        task_status.started(scope)
        while True:
            await trio.sleep(LOAD_PROGRESS_SECS)
            log.info("still loading model %s (%.0f s)", name, trio.current_time() - began)


def describe_loaded(spec: ModelSpec, handle: ModelHandle, seconds: float, measured: int
                    ) -> None:
    """The log lines of a model that loaded: what it is and how it runs."""
    info = handle.info
    log.info("model %s loaded (context %d tokens, weights %s, %d bytes, BLAS threads: %s) in "
             "%.1f s from %s", spec.id, info.context_length, info.weights, measured,
             "n/a" if info.blas_threads is None else info.blas_threads, seconds, info.path)
    refused = [role for role, kept in attrs.asdict(info.template_roles).items() if not kept]
    log.info("model %s: tool-call format %s, reasoning %s, template refuses %s (merged as "
             "docs/models.md says)", spec.id, info.family.name,
             " ... ".join(info.think) if info.reasoning else "none",
             ", ".join(refused) or "no role")


def budget(spec: ModelSpec, options: EngineOptions) -> int:
    """A model's memory beyond its weights, as admission counts it: its prompt cache's
    byte budget and the KV cache of --parallel sequences at its full context."""
    return options.prompt_cache_bytes + kv_budget(spec, options.parallel)


def one_line(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class ModelsHandle:
    """What the services hold: the available models (read-only: their specs) and, by
    message, their leases and states."""

    def __init__(self, inbox: trio.MemorySendChannel[Any], specs: tuple[ModelSpec, ...]):
        self._inbox = inbox
        self.specs = specs
        self._by_name = {n: s for s in reversed(specs) for n in s.names}

    @property
    def default(self) -> ModelSpec:
        """The first model (the first --model): what a lone-model server names."""
        return self.specs[0]

    def find(self, name: str, caller: Caller | None = None) -> ModelSpec:
        """The model a request's `model` names, if the caller may use it; else the 400
        `model_not_found` an unknown name is (another tenant's model is unknown here)."""
        spec = self._by_name.get(name)
        if spec is None or (caller is not None and not caller.tenant.may_use(spec.names)):
            known = [s.id for s in self.visible(caller)]
            raise ModelNotFound(f"The model '{name}' does not exist; this server serves "
                                f"{', '.join(known) or 'no model for this key'}",
                                param="model")
        return spec

    def visible(self, caller: Caller | None) -> list[ModelSpec]:
        return [s for s in self.specs
                if caller is None or caller.tenant.may_use(s.names)]

    def lookup(self, model_id: str, caller: Caller | None) -> ModelSpec:
        """GET /v1/models/{id}: a 404 for an unknown (or another tenant's) model."""
        try:
            return self.find(model_id, caller)
        except ModelNotFound:
            raise NotFound(f"The model '{model_id}' does not exist", param="model",
                           code="model_not_found") from None

    async def acquire(self, spec: ModelSpec, *, keep_alive: float | None = None,
                      timeout: float = math.inf, autoload: bool | None = None,
                      early: bool = False) -> Lease:
        """A lease on `spec`'s model, loading it first if needed (waiting up to `timeout`
        seconds: then a 503 with Retry-After; the load goes on for the next request). A
        cancel while it loads withdraws this request, and cancels the load when nobody
        else waits for it. `early`: answered once the model's tokenizer is ready, before
        its weights (the request renders, answers, and waits in the model's queue)."""
        asked: tuple[int, trio.MemoryReceiveChannel[outcome.Outcome[ModelHandle]]] = \
            await ask(self._inbox, lambda r: _Acquire(spec.id, keep_alive, autoload, r,
                                                      early))
        uid, ready = asked
        try:
            with trio.move_on_after(timeout) as waited:
                async with ready:
                    result = await ready.receive()
            if waited.cancelled_caught:
                raise ModelUnavailable(
                    f"model '{spec.id}' is still loading after {timeout:g} s "
                    "(--load-timeout); its load goes on: retry shortly",
                    retry_after_secs=max(1, int(min(timeout, 30))))
            handle = result.unwrap()
        except BaseException:
            with trio.move_on_after(RELEASE_TIMEOUT, shield=True):
                await self._inbox.send(_Release(uid))
            raise
        return Lease(uid, handle, spec, self._inbox)

    async def load(self, spec: ModelSpec) -> None:
        """Loads `spec`'s model if it is not loaded (the admin route); it then stays for its
        keep-alive."""
        lease = await self.acquire(spec, autoload=True)
        await lease.release()

    async def unload(self, spec: ModelSpec) -> None:
        """Unloads it (409 when it is in use); returns once asked (GET shows `unloading`
        until its memory is back)."""
        await ask(self._inbox, lambda r: _Unload(spec.id, r))

    async def views(self) -> list[ModelView]:
        """Every model's state, with each loaded model's own statistics."""
        rows = await ask(self._inbox, _Views)
        out: list[ModelView] = []
        for _, _, handle, view in rows:
            if handle is not None:
                with trio.move_on_after(RELEASE_TIMEOUT):
                    view = attrs.evolve(view, info=handle.info,
                                    statistics=await handle.statistics())
            out.append(view)
        return out
