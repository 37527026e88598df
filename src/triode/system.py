"""The root of the actor tree: the one start path, for `triode serve` and plain hypercorn.

    start_actors(settings)          started in the caller's nursery
    ├── ModelActor (+ engine thread)
    ├── Registry (+ one Supervisor per live response)
    ├── ResponseStore, ConversationStore, ReasoningEchoStore
    └── → Handles: the actors' handles, the turn service and the conversation service,
          for the HTTP layer

`triode serve` (cli.py) starts it and then hypercorn beside it; under plain hypercorn
(`hypercorn --worker-class trio 'triode.http.app:create_app()'`) the app's lifespan starts
it with settings from the environment.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import attrs
import trio

from .actors.model import ModelActor, ModelHandle
from .actors.registry import Registry, RegistryHandle
from .actors.store import (ConversationStore, ConversationStoreHandle, ReasoningEchoHandle,
                           ReasoningEchoStore, ResponseStore, ResponseStoreHandle)
from .model.blas import preload_blas
from .model.loading import BUNDLED_PATH
from .service.conversations import Conversations
from .service.turns import Turns
from .settings import BUNDLED_MODEL, Settings

log = logging.getLogger("triode")

BUNDLED_ALIAS = "triode-tiny"


@attrs.frozen
class Handles:
    """What the HTTP layer is given: the turn service, the conversation service, the actors'
    handles (for monitoring) and a few fixed facts."""

    turns: Turns
    model: ModelHandle
    registry: RegistryHandle
    responses: ResponseStoreHandle
    conversations: ConversationStoreHandle
    echo: ReasoningEchoHandle
    model_names: tuple[str, ...]
    blas: str
    conversations_api: Conversations
    api_key: str | None = None
    started_at: int = attrs.Factory(lambda: int(time.time()))


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


async def start_actors(settings: Settings, *,
                       task_status: trio.TaskStatus[Handles] = trio.TASK_STATUS_IGNORED
                       ) -> None:
    """Starts the actor tree under the caller's nursery and reports its Handles."""
    blas = preload_blas(settings.blas)
    log.info("BLAS in use: %s", blas)
    async with trio.open_nursery() as nursery:
        model: ModelHandle = await nursery.start(ModelActor(
            model=model_path(settings), parallel=settings.parallel,
            max_queue=settings.max_queue, context_length=settings.context_length,
            blas_threads=settings.blas_threads,
            prompt_cache_bytes=settings.prompt_cache_bytes).run)
        registry: RegistryHandle = await nursery.start(Registry(
            background_max_jobs=settings.responses_background_max_jobs).run)
        responses: ResponseStoreHandle = await nursery.start(ResponseStore(
            max_entries=settings.responses_store_max_entries,
            max_bytes=settings.responses_store_max_bytes,
            ttl_secs=settings.responses_store_ttl_secs,
            ephemeral_ttl_secs=settings.responses_background_ephemeral_ttl_secs).run)
        conversations: ConversationStoreHandle = await nursery.start(ConversationStore(
            max_entries=settings.conversation_store_max_entries,
            max_bytes=settings.conversation_store_max_bytes,
            ttl_secs=settings.conversation_store_ttl_secs).run)
        # The seed's reasoning echo exists for the prompt cache: off with it.
        echo: ReasoningEchoHandle = await nursery.start(ReasoningEchoStore(
            max_bytes=settings.reasoning_echo_max_bytes if settings.prompt_cache_bytes else 0
        ).run)
        info = model.info
        log.info("model %s loaded (context %d tokens, %d slots, BLAS threads: %s)",
                 info.path, info.context_length, settings.parallel,
                 "n/a" if info.blas_threads is None else info.blas_threads)
        names = model_names(settings, info.path)
        turns = Turns(model=model, registry=registry, responses=responses,
                      conversations=conversations, echo=echo, model_names=names,
                      hosted_tools=settings.hosted_tools,
                      background_off=background_off(settings))
        task_status.started(Handles(
            turns=turns, model=model, registry=registry, responses=responses,
            conversations=conversations, echo=echo, model_names=names, blas=blas,
            conversations_api=Conversations(conversations), api_key=settings.api_key))
