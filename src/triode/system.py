"""The root of the actor tree: the one start path, for `triode serve` and plain hypercorn.

    start_actors(settings)          started in the caller's nursery
    ├── EngineHost (the one engine thread: steps every loaded model's engine)
    ├── ModelsRegistry (+ one ModelActor per loaded model, its engine on the host)
    ├── Registry (+ one Supervisor per live response)
    ├── ResponseStore, ConversationStore, ReasoningEchoStore (over the --store backend)
    ├── JobBoard (a shared store: Redis or SQLite) and the reaper of stopped processes' jobs
    └── → Handles: the actors' handles, the turn service and the conversation service,
          for the HTTP layer

`triode serve` (cli.py) starts it and then hypercorn beside it; under plain hypercorn
(`hypercorn --worker-class trio 'triode.http.app:create_app()'`) the app's lifespan starts
it with settings from the environment.

A start that cannot succeed (a `--model` path, the first model not loading, a SQLite
`--store` that cannot be opened) raises one `SettingsError` naming the flag, before the model
loads when it can be known then. With a shared store the server answers only once the jobs a
restart interrupted are stored as failed. Once
started the tree drains before it stops: cancelling `start_actors` (the end of the process)
first has the registry wait up to `--shutdown-timeout` for the live responses and end the
rest `failed`, so each gets its terminal event and is stored (docs/cancellation.md).
"""

from __future__ import annotations

import logging
import re
import signal
import time
from pathlib import Path

import attrs
import trio

from .actors.jobs import JobBoard, JobBoardHandle
from .actors.limits import TenantLimits, TenantLimitsHandle
from .actors.host import EngineHost
from .actors.model import GroupFailure, ModelActor
from .actors.models import ModelsHandle, ModelsRegistry
from .actors.monitor import Monitor, MonitorHandle
from .actors.registry import CUT_GRACE, Registry, RegistryHandle
from .actors.store import (ConversationStore, ConversationStoreHandle, ReasoningEchoHandle,
                           ReasoningEchoStore, ResponseStore, ResponseStoreHandle)
from .errors import SettingsError, StoreUnavailable
from .model.blas import preload_blas
from .model.disk_cache import check_directory
from .model.engine import Engine, EngineOptions
from .model.catalog import ModelSpec, catalog
from .model.loading import LoadOptions, check_model, check_options
from .model.vision import vision_config
from .service.conversations import Conversations
from .actors.mcp import McpPool, McpPoolHandle
from .service.mcp import McpLimits, McpService, load_config, missing_sdk
from .service.media import FetchRule, MediaLimits
from .service.stores import Stores
from .service.turns import Turns
from .storage.backend import Backend, open_backend
from .storage.values import StoreOpenError
from .settings import Settings
from .tenants import Tenants, single

log = logging.getLogger("triode")



@attrs.frozen
class Handles:
    """What the HTTP layer is given: the turn service, the conversation service, the actors'
    handles (for monitoring) and a few fixed facts."""

    turns: Turns                   # the turn service (every tenant's; calls name a Caller)
    conversations: Conversations   # the conversation service (likewise)
    models: ModelsHandle           # the models registry: every available model, by message
    registry: RegistryHandle
    stores: Stores                 # the store actors' handles, every tenant's
    blas: str
    tenants: Tenants = attrs.Factory(lambda: Tenants(single(None)))
    limits: TenantLimitsHandle | None = None
    started_at: int = attrs.Factory(lambda: int(time.time()))
    monitor: MonitorHandle | None = None   # the live page's history of generation's figures
    board: JobBoardHandle | None = None    # a shared store's job board (the live page reads it)
    mcp: McpPoolHandle | None = None       # the MCP connections (--mcp-config, --mcp-urls)
    group: GroupFailure | None = None      # --distributed: the group of ranks' failure


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
    specs = checked_catalog(settings)
    tenants = Tenants.configured(settings.api_key, settings.api_keys_file)
    mcp_limits(settings)   # a bad --mcp-config, or MCP without its SDK, fails the start
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
                        handles = await actors.start(_start_tree, settings, tenants, specs)
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


def mcp_limits(settings: Settings) -> McpLimits:
    """The MCP servers requests may reach; a SettingsError for a config file that cannot be
    used, or for MCP flags without the `mcp` package."""
    limits = McpLimits(load_config(settings.mcp_config), FetchRule.parse(settings.mcp_urls),
                       timeout=settings.mcp_timeout, max_calls=settings.mcp_max_calls,
                       max_output_bytes=settings.mcp_max_output_bytes)
    if settings.mcp_config is not None or settings.mcp_urls:
        missing = missing_sdk()
        if missing is not None:
            raise SettingsError(missing)
    return limits


# --distributed: how long a shutdown waits for the engine thread to close its engine (and
# tell the other ranks to stop) before leaving it behind, hung in a collective.
ABANDON_AFTER = 10.0


def checked_catalog(settings: Settings) -> tuple[ModelSpec, ...]:
    """The models to serve, each checked before anything loads (a SettingsError naming the
    flag); under --distributed, one a group of ranks can serve."""
    specs = catalog(settings)
    for spec in specs:
        check_model(spec.path)
        check_options(load_options(settings, spec))
        if settings.distributed != "off" and vision_config(spec.path) is not None:
            raise SettingsError(f"--distributed {settings.distributed}: --model {spec.path} is "
                                "a vision model, whose image features triode does not yet "
                                "compute in lockstep on every rank")
    return specs


def load_options(settings: Settings, spec: ModelSpec) -> LoadOptions:
    """Under --distributed, `--cpu-weights auto` is the weights as stored: `auto` decides
    from the memory each machine has, and every rank must run the same precision."""
    cpu_weights = settings.cpu_weights
    if settings.distributed != "off" and cpu_weights == "auto":
        cpu_weights = "native"
    return LoadOptions(tool_format=spec.tool_format, chat_template=spec.chat_template,
                       cpu_weights=cpu_weights)


def follow(settings: Settings) -> None:
    """A rank other than 0 of `--distributed`: only the engine, on its shard, applying rank
    0's step records until rank 0's engine ends (or the group breaks: what broke it is
    raised). No HTTP, no stores, no actors."""
    (spec,) = checked_catalog(settings)
    engine = Engine(engine_options(settings, spec))
    engine.run(lambda *step: (), lambda info, tokenizer: log.info(
        "rank serving its shard of %s (--distributed %s)", spec.id, settings.distributed))


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


def engine_options(settings: Settings, spec: ModelSpec) -> EngineOptions:
    """A model's engine knobs: its own settings (the config file's, or the flags') and the
    server's."""
    return EngineOptions(
        model=spec.path, parallel=settings.parallel, context_length=spec.context_length,
        blas_threads=settings.blas_threads, prompt_cache_bytes=settings.prompt_cache_bytes,
        prefill_chunk=settings.prefill_chunk, kv_bits=spec.kv_bits,
        speculative=spec.speculative, attention_window=spec.attention_window,
        prompt_cache_dir=prompt_cache_dir(settings, spec),
        prompt_cache_disk_bytes=settings.prompt_cache_disk_bytes,
        load_options=load_options(settings, spec), distributed=settings.distributed,
        watchdog=settings.distributed_watchdog,
        distributed_control=settings.distributed_control)


def prompt_cache_dir(settings: Settings, spec: ModelSpec) -> str | None:
    """A model's disk tier: --prompt-cache-dir itself for the first --model (as with one
    model), a subdirectory named after its id for each other one (each tier keeps its own
    index and byte budget)."""
    if settings.prompt_cache_dir is None or spec.preload:
        return settings.prompt_cache_dir
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.id).lstrip(".") or "model"
    return str(Path(settings.prompt_cache_dir) / "models" / safe)


async def start_models(nursery: trio.Nursery, settings: Settings,
                       specs: tuple[ModelSpec, ...], group: GroupFailure | None = None
                       ) -> ModelsHandle:
    """The engine host and the models registry in `nursery`; the first --model is loaded
    before this returns (a failure: a SettingsError naming --model)."""
    if settings.prompt_cache_dir is not None:
        try:
            check_directory(settings.prompt_cache_dir)
        except OSError as exc:
            raise SettingsError(f"--prompt-cache-dir: {settings.prompt_cache_dir}: cannot "
                                f"write there ({exc.strerror or exc})") from None
    host: EngineHost = await nursery.start(EngineHost(
        abandon_after=ABANDON_AFTER if settings.distributed != "off" else None).run)
    models: ModelsHandle = await nursery.start(ModelsRegistry(
        specs, host=host, engine_options=lambda spec: engine_options(settings, spec),
        max_queue=settings.max_queue, max_loaded_models=settings.max_loaded_models,
        max_model_memory=settings.max_model_memory, autoload=not settings.no_autoload,
        actor_factory=lambda options, host, max_queue: ModelActor(
            options, host=host, max_queue=max_queue, group=group)).run)
    return models


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


async def _start_tree(settings: Settings, tenants: Tenants, specs: tuple[ModelSpec, ...], *,
                      task_status: trio.TaskStatus[Handles] = trio.TASK_STATUS_IGNORED
                      ) -> None:
    """The actors in one nursery; reports their Handles once every one has started."""
    blas = preload_blas(settings.blas)
    log.info("BLAS in use: %s", blas)
    backend = await open_store(settings)     # before the model loads: a bad --store fails fast
    try:
        async with trio.open_nursery() as nursery:
            await _start_actors_on(nursery, settings, tenants, specs, backend, blas,
                                   task_status)
    finally:
        backend.close()


async def _start_actors_on(nursery: trio.Nursery, settings: Settings, tenants: Tenants,
                           specs: tuple[ModelSpec, ...], backend: Backend,
                           blas: str, task_status: trio.TaskStatus[Handles]) -> None:
    """The actors in `nursery`; reports their Handles once every one has started."""
    group = GroupFailure() if settings.distributed != "off" else None
    models = await start_models(nursery, settings, specs, group)
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
    board: JobBoardHandle | None = None
    shared = backend.board()
    if shared is not None:
        board = await nursery.start(JobBoard(shared, registry).run)
    limits: TenantLimitsHandle = await nursery.start(TenantLimits(backend.counters()).run)
    stores = Stores(responses, conversations, reasoning)
    mcp = mcp_limits(settings)
    pool: McpPoolHandle | None = None
    if mcp.enabled:
        pool = await nursery.start(McpPool(idle=settings.mcp_idle).run)
    turns = Turns(mcp=McpService(mcp, pool),models=models, registry=registry, stores=stores, limits=limits,
                  load_timeout=settings.load_timeout,
                  hosted_tools=settings.hosted_tools,
                  background_off=background_off(settings), board=board,
                  prompts_dir=Path(settings.prompts_dir) if settings.prompts_dir else None,
                  media=MediaLimits(FetchRule.parse(settings.media_fetch),
                                    max_bytes=settings.media_max_bytes,
                                    max_pixels=settings.media_max_pixels))
    await nursery.start(turns.reap)    # the jobs a restart interrupted end failed first
    monitor: MonitorHandle = await nursery.start(Monitor(models).run)
    task_status.started(Handles(
        turns=turns, conversations=Conversations(conversations), models=models,
        registry=registry, stores=stores, blas=blas, tenants=tenants,
        limits=limits, group=group,
        monitor=monitor, board=board, mcp=pool))
