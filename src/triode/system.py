"""The root of the actor tree: the one start path, for `triode serve` and plain hypercorn.

    start_actors(settings)          started in the caller's nursery
    ├── ModelActor (+ engine thread)
    ├── Registry (+ one Supervisor per live response)
    ├── ResponseStore, ConversationStore, ReasoningEchoStore (over the --store backend)
    ├── JobBoard (a shared store: Redis or SQLite) and the reaper of stopped processes' jobs
    └── → Handles: the actors' handles, the turn service and the conversation service,
          for the HTTP layer

`triode serve` (cli.py) starts it and then hypercorn beside it; under plain hypercorn
(`hypercorn --worker-class trio 'triode.http.app:create_app()'`) the app's lifespan starts
it with settings from the environment.

A start that cannot succeed (the `--model` path, a model that does not load, a SQLite
`--store` that cannot be opened) raises one `SettingsError` naming the flag, before the model
loads when it can be known then. With a shared store the server answers only once the jobs a
restart interrupted are stored as failed. Once
started the tree drains before it stops: cancelling `start_actors` (the end of the process)
first has the registry wait up to `--shutdown-timeout` for the live responses and end the
rest `failed`, so each gets its terminal event and is stored (docs/cancellation.md).
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

import attrs
import trio

from .actors.jobs import JobBoard, JobBoardHandle
from .actors.limits import TenantLimits, TenantLimitsHandle
from .actors.model import ModelActor, ModelHandle
from .actors.monitor import Monitor, MonitorHandle
from .actors.registry import CUT_GRACE, Registry, RegistryHandle
from .actors.store import (ConversationStore, ConversationStoreHandle, ReasoningEchoHandle,
                           ReasoningEchoStore, ResponseStore, ResponseStoreHandle)
from .errors import SettingsError, StoreUnavailable
from .model.blas import preload_blas
from .model.disk_cache import check_directory
from .model.engine import EngineOptions
from .model.loading import BUNDLED_PATH, LoadOptions, check_model, check_options, load_failure
from .service.conversations import Conversations
from .service.media import FetchRule, MediaLimits
from .service.stores import Stores
from .service.turns import Turns
from .storage.backend import Backend, open_backend
from .storage.values import StoreOpenError
from .settings import BUNDLED_MODEL, Settings
from .tenants import Tenants, single

log = logging.getLogger("triode")

BUNDLED_ALIAS = "triode-tiny"

LOAD_PROGRESS_SECS = 5.0   # a slow model load says it is still loading this often


@attrs.frozen
class Handles:
    """What the HTTP layer is given: the turn service, the conversation service, the actors'
    handles (for monitoring) and a few fixed facts."""

    turns: Turns                   # the turn service (every tenant's; calls name a Caller)
    conversations: Conversations   # the conversation service (likewise)
    model: ModelHandle
    registry: RegistryHandle
    stores: Stores                 # the store actors' handles, every tenant's
    model_names: tuple[str, ...]
    blas: str
    tenants: Tenants = attrs.Factory(lambda: Tenants(single(None)))
    limits: TenantLimitsHandle | None = None
    started_at: int = attrs.Factory(lambda: int(time.time()))
    monitor: MonitorHandle | None = None   # the live page's history of generation's figures
    board: JobBoardHandle | None = None    # a shared store's job board (the live page reads it)


def model_path(settings: Settings) -> str:
    """The local path or Hugging Face repo id to load."""
    return str(BUNDLED_PATH) if settings.model == BUNDLED_MODEL else settings.model


def model_names(settings: Settings, path: str) -> tuple[str, ...]:
    """Names a request's `model` may use: the alias first (the one /v1/models lists)."""
    names: list[str] = []
    if settings.model_alias:
        names.append(settings.model_alias)
    if settings.model == BUNDLED_MODEL:
        names.append(BUNDLED_ALIAS)
    names += [settings.model, path, Path(path).name]
    if Path(path).suffix.lower() == ".gguf":
        names.append(Path(path).stem)
    return tuple(dict.fromkeys(n for n in names if n))


def background_off(settings: Settings) -> str | None:
    """Why background mode is off (any of its budgets is 0), or None when it is on."""
    for flag, value in (("responses-store-max-entries", settings.responses_store_max_entries),
                        ("responses-store-max-bytes", settings.responses_store_max_bytes),
                        ("responses-background-max-jobs",
                         settings.responses_background_max_jobs)):
        if value == 0:
            return f"--{flag} is 0"
    return None


async def open_store(settings: Settings) -> Backend:
    """The stores' backend, opened. A SQLite database is created if needed: one that cannot
    be opened is a SettingsError naming --store. A Redis one is pinged (unreachable: a
    warning, not a failure: the store routes answer 503 until it comes back)."""
    backend = open_backend(settings.store, settings.store_prefix)
    try:
        await trio.to_thread.run_sync(backend.open)
    except StoreOpenError as exc:
        raise SettingsError(f"--store {settings.store}: {exc}") from None
    except StoreUnavailable as exc:
        log.warning("store: %s (%s): %s", settings.store, backend.describe(), exc.message)
        return backend
    log.info("store: %s (%s)", settings.store, backend.describe())
    return backend


async def start_actors(settings: Settings, *,
                       task_status: trio.TaskStatus[Handles] = trio.TASK_STATUS_IGNORED
                       ) -> None:
    """Starts the actor tree under the caller's nursery and reports its Handles.

    Raises a lone SettingsError (no exception group) when a setting cannot start it. Once
    started, the tree is shielded from the caller's cancellation: a cancel first drains the
    registry (up to `--shutdown-timeout`, then the rest end `failed`), then stops the tree.
    Plain hypercorn's lifespan cancels it only after the HTTP connections have closed, so
    there the drain is what ends background jobs with a terminal status."""
    check_model(model_path(settings))
    check_options(load_options(settings))
    tenants = Tenants.configured(settings.api_key, settings.api_keys_file)
    tree = trio.CancelScope()
    handles: Handles | None = None
    tree_ended = False

    async def drain_when_cancelled() -> None:
        try:
            await trio.sleep_forever()
        finally:
            if handles is not None and not tree_ended:
                with trio.move_on_after(settings.shutdown_timeout + CUT_GRACE, shield=True):
                    await handles.registry.drain(settings.shutdown_timeout)
            tree.cancel()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain_when_cancelled)
            try:
                with tree:
                    async with trio.open_nursery() as actors:
                        handles = await actors.start(_start_tree, settings, tenants)
                        actors.start_soon(reload_on_sighup, tenants)
                        tree.shield = True
                        task_status.started(handles)
            finally:
                tree_ended = True
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        error = startup_error(group)
        if handles is not None or error is None:
            raise
        raise error from None


def load_options(settings: Settings) -> LoadOptions:
    return LoadOptions(tool_format=settings.tool_format, chat_template=settings.chat_template,
                       cpu_weights=settings.cpu_weights)


def startup_error(exc: BaseException) -> SettingsError | None:
    """The one SettingsError that `exc` is, or that it carries (in nested exception groups)
    with nothing else: what stopped a start, in a line naming the flag."""
    if isinstance(exc, SettingsError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = exc.split(SettingsError)
        leaves: list[BaseException] = []
        pending: list[BaseException] = [matched] if matched is not None else []
        while pending:
            e = pending.pop()
            if isinstance(e, BaseExceptionGroup):
                pending.extend(e.exceptions)
            else:
                leaves.append(e)
        if rest is None and len(leaves) == 1 and isinstance(leaves[0], SettingsError):
            return leaves[0]
    return None


def engine_options(settings: Settings, path: str) -> EngineOptions:
    """The engine's knobs, taken from the settings once."""
    return EngineOptions(
        model=path, parallel=settings.parallel, context_length=settings.context_length,
        blas_threads=settings.blas_threads, prompt_cache_bytes=settings.prompt_cache_bytes,
        prefill_chunk=settings.prefill_chunk, kv_bits=settings.kv_bits,
        speculative=settings.speculative, attention_window=settings.attention_window,
        prompt_cache_dir=settings.prompt_cache_dir,
        prompt_cache_disk_bytes=settings.prompt_cache_disk_bytes,
        load_options=load_options(settings))


async def load_model(nursery: trio.Nursery, settings: Settings) -> ModelHandle:
    """Starts the model actor in `nursery` and returns its handle once the model has loaded.
    Logs the load before it starts and every LOAD_PROGRESS_SECS while it lasts; a load that
    fails is a SettingsError naming `--model` (the traceback is logged at debug level)."""
    path = model_path(settings)
    if settings.prompt_cache_dir is not None:
        try:
            check_directory(settings.prompt_cache_dir)
        except OSError as exc:
            raise SettingsError(f"--prompt-cache-dir: {settings.prompt_cache_dir}: cannot "
                                f"write there ({exc.strerror or exc})") from None
    log.info("loading model %s", path)
    began = trio.current_time()

    async def report_progress(*, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            while True:
                await trio.sleep(LOAD_PROGRESS_SECS)
                log.info("still loading model %s (%.0f s)", path, trio.current_time() - began)

    progress: trio.CancelScope = await nursery.start(report_progress)
    try:
        model: ModelHandle = await nursery.start(ModelActor(
            engine_options(settings, path), max_queue=settings.max_queue).run)
    except Exception as exc:
        log.debug("loading model %s failed", path, exc_info=exc)
        raise load_failure(path, exc) from None
    finally:
        progress.cancel()
    return model


async def reload_on_sighup(tenants: Tenants) -> None:
    """Re-reads --api-keys-file at each SIGHUP (each worker process on its own); a file that
    cannot be used keeps the table in force and says why in one log line."""
    if tenants.path is None:
        return
    try:
        receiver = trio.open_signal_receiver(signal.SIGHUP)
    except (RuntimeError, ValueError):   # not the main thread (tests under trio in threads)
        log.warning("--api-keys-file: SIGHUP cannot be received here; the file is not "
                    "re-read")
        return
    with receiver as signals:
        async for _ in signals:
            try:
                tenants.reload()
            except SettingsError as exc:
                log.error("SIGHUP: %s; the tenants in force are kept", exc)
            else:
                log.info("SIGHUP: %s re-read: %d tenant%s", tenants.path,
                         len(tenants.table.tenants),
                         "" if len(tenants.table.tenants) == 1 else "s")


async def _start_tree(settings: Settings, tenants: Tenants, *,
                      task_status: trio.TaskStatus[Handles] = trio.TASK_STATUS_IGNORED
                      ) -> None:
    """The actors in one nursery; reports their Handles once every one has started."""
    blas = preload_blas(settings.blas)
    log.info("BLAS in use: %s", blas)
    backend = await open_store(settings)     # before the model loads: a bad --store fails fast
    try:
        async with trio.open_nursery() as nursery:
            await _start_actors_on(nursery, settings, tenants, backend, blas, task_status)
    finally:
        backend.close()


async def _start_actors_on(nursery: trio.Nursery, settings: Settings, tenants: Tenants,
                           backend: Backend,
                           blas: str, task_status: trio.TaskStatus[Handles]) -> None:
    """The actors in `nursery`; reports their Handles once every one has started."""
    model = await load_model(nursery, settings)
    registry: RegistryHandle = await nursery.start(Registry(
        background_max_jobs=settings.responses_background_max_jobs).run)
    responses: ResponseStoreHandle = await nursery.start(ResponseStore(
        max_entries=settings.responses_store_max_entries,
        max_bytes=settings.responses_store_max_bytes,
        ttl_secs=settings.responses_store_ttl_secs,
        ephemeral_ttl_secs=settings.responses_background_ephemeral_ttl_secs,
        backend=backend).run)
    conversations: ConversationStoreHandle = await nursery.start(ConversationStore(
        max_entries=settings.conversation_store_max_entries,
        max_bytes=settings.conversation_store_max_bytes,
        ttl_secs=settings.conversation_store_ttl_secs, backend=backend).run)
    # The reasoning echo exists for the prompt cache: off with it (docs/configuration.md).
    reasoning: ReasoningEchoHandle = await nursery.start(ReasoningEchoStore(
        max_bytes=settings.reasoning_echo_max_bytes if settings.prompt_cache_bytes else 0,
        backend=backend).run)
    info = model.info
    log.info("model %s loaded (context %d tokens, %d slots, weights %s, BLAS threads: %s)",
             info.path, info.context_length, settings.parallel, info.weights,
             "n/a" if info.blas_threads is None else info.blas_threads)
    refused = [role for role, kept in attrs.asdict(info.template_roles).items() if not kept]
    log.info("model %s: tool-call format %s, reasoning %s, template refuses %s (merged as "
             "docs/models.md says)", info.path, info.family.name,
             " ... ".join(info.think) if info.reasoning else "none",
             ", ".join(refused) or "no role")
    names = model_names(settings, info.path)
    board: JobBoardHandle | None = None
    shared = backend.board()
    if shared is not None:
        board = await nursery.start(JobBoard(shared, registry).run)
    limits: TenantLimitsHandle = await nursery.start(TenantLimits(backend.counters()).run)
    stores = Stores(responses, conversations, reasoning)
    turns = Turns(model=model, registry=registry, stores=stores, limits=limits,
                  model_names=names,
                  hosted_tools=settings.hosted_tools,
                  background_off=background_off(settings), board=board,
                  prompts_dir=Path(settings.prompts_dir) if settings.prompts_dir else None,
                  media=MediaLimits(FetchRule.parse(settings.media_fetch),
                                    max_bytes=settings.media_max_bytes,
                                    max_pixels=settings.media_max_pixels))
    await nursery.start(turns.reap)    # the jobs a restart interrupted end failed first
    monitor: MonitorHandle = await nursery.start(Monitor(model).run)
    task_status.started(Handles(
        turns=turns, conversations=Conversations(conversations), model=model,
        registry=registry, stores=stores, model_names=names, blas=blas, tenants=tenants,
        limits=limits,
        monitor=monitor, board=board))
