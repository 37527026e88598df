"""The root of the actor tree: starts the actors, then hypercorn as their child.

    trio.run(system.main, settings)
    └── root nursery
        ├── ModelActor (+ engine thread)
        ├── Registry (+ one Supervisor per live response)
        ├── ResponseStore, ConversationStore
        └── hypercorn.trio.serve(Quart-Trio app)
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import trio

from .http.app import Handles, create_app
from .http.translate import Defaults
from .model.blas import preload_blas
from .settings import BUNDLED_MODEL, Settings

log = logging.getLogger("triode")

BUNDLED_ALIAS = "triode-tiny"


def model_names(settings: Settings, path: str) -> tuple[str, ...]:
    """Names a request's `model` may use: the alias first (the one /v1/models lists)."""
    names: list[str] = []
    if settings.model_alias:
        names.append(settings.model_alias)
    if settings.model == BUNDLED_MODEL:
        names.append(BUNDLED_ALIAS)
    names += [settings.model, path, Path(path).name]
    return tuple(dict.fromkeys(n for n in names if n))


async def start_actors(settings: Settings, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Starts the actor tree under the caller's nursery and reports its Handles."""
    from .actors.model import ModelActor
    from .actors.registry import Registry
    from .actors.store import ConversationStore, ReasoningEchoStore, ResponseStore

    blas = preload_blas(settings.blas)
    log.info("BLAS in use: %s", blas)
    async with trio.open_nursery() as nursery:
        model = await nursery.start(ModelActor(
            model=settings.model, parallel=settings.parallel, max_queue=settings.max_queue,
            context_length=settings.context_length, blas_threads=settings.blas_threads,
            prompt_cache_bytes=settings.prompt_cache_bytes).run)
        registry = await nursery.start(Registry(
            background_max_jobs=settings.responses_background_max_jobs).run)
        responses = await nursery.start(ResponseStore(
            max_entries=settings.responses_store_max_entries,
            max_bytes=settings.responses_store_max_bytes,
            ttl_secs=settings.responses_store_ttl_secs,
            ephemeral_ttl_secs=settings.responses_background_ephemeral_ttl_secs).run)
        conversations = await nursery.start(ConversationStore(
            max_entries=settings.conversation_store_max_entries,
            max_bytes=settings.conversation_store_max_bytes,
            ttl_secs=settings.conversation_store_ttl_secs).run)
        # The seed's reasoning echo exists for the prompt cache: off with it.
        echo = await nursery.start(ReasoningEchoStore(
            max_bytes=settings.reasoning_echo_max_bytes if settings.prompt_cache_bytes else 0).run)
        info = model.info
        log.info("model %s loaded (context %d tokens, %d slots, BLAS threads: %s)",
                 info.path, info.context_length, settings.parallel,
                 "n/a" if info.blas_threads is None else info.blas_threads)
        task_status.started(Handles(
            model=model, registry=registry, responses=responses, conversations=conversations, echo=echo,
            model_names=model_names(settings, info.path),
            defaults=Defaults(**info.sampling_defaults), blas=blas, api_key=settings.api_key,
            hosted_tools=settings.hosted_tools, background_off=background_off(settings)))


def background_off(settings: Settings) -> str | None:
    """Why background mode is off (any of its budgets is 0), or None when it is on."""
    for flag, value in (("responses-store-max-entries", settings.responses_store_max_entries),
                        ("responses-store-max-bytes", settings.responses_store_max_bytes),
                        ("responses-background-max-jobs",
                         settings.responses_background_max_jobs)):
        if value == 0:
            return f"--{flag} is 0"
    return None


async def main(settings: Settings) -> None:
    """Serves until SIGINT or SIGTERM; then hypercorn shuts down gracefully (open streams
    get `graceful_timeout`) and the actor tree is cancelled: live responses end with the
    process, the engine thread ends at its next exchange."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async def stop_requested() -> None:
            async for signum in signals:
                log.info("%s received: shutting down", signal.Signals(signum).name)
                return

        async with trio.open_nursery() as nursery:
            handles = await nursery.start(start_actors, settings)
            config = Config()
            config.bind = [f"{settings.host}:{settings.port}"]
            config.accesslog = None
            config.graceful_timeout = 2.0

            async def serve_then_stop(*, task_status) -> None:
                await serve(create_app(handles), config, shutdown_trigger=stop_requested,
                            task_status=task_status)
                nursery.cancel_scope.cancel()

            binds = await nursery.start(serve_then_stop)
            for bind in binds:
                # Tests and scripts read this line to find a port chosen with --port 0.
                print(f"triode listening on {bind}", file=sys.stderr, flush=True)
