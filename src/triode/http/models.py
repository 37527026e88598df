"""The models routes: GET /v1/models (every model this caller may use, with its state),
GET /v1/models/{id}, and the admin routes POST /v1/models/{id}/load and /unload.

A tenant sees only its own models (the keys file's `models`): another tenant's model is a
404 here and an unknown `model` in a request. The admin routes need the API key; with a keys
file, a tenant with `"admin": true`.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from quart import Response, request

from ..actors.models import ModelView
from ..errors import Forbidden
from ..model.catalog import native_context
from .body import json_response
from .caller import caller
from .contract import Operation, Param, documented
from .routes import handles, route


class ModelObject(TypedDict):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    context_window: int | None      # None: not loaded, and its files do not say
    input_modalities: list[str]     # what its input may hold: text, image, file
    # triode's: the model's state in this server (docs/models.md)
    status: Literal["unloaded", "loading", "loaded", "unloading", "failed"]
    error: str | None               # why it failed to load, in one line
    pinned: bool
    memory_bytes: int               # its weights: measured at its last load (MLX's
                                    # counter), else its files' size
    reserved_bytes: int             # what --max-model-memory counts: its weights plus its
                                    # KV-cache and prompt-cache budgets
    expires_at: float | None        # unix time it unloads if still idle; None: never/not
    keep_alive: float               # seconds idle before it unloads; -1: never
    aliases: list[str]              # other names a request's `model` may use (its path too)


class ModelList(TypedDict):
    object: Literal["list"]
    data: list[ModelObject]


class TruncationPolicy(TypedDict):
    mode: str
    limit: int


class CodexModel(TypedDict):
    """A model as Codex CLI's model catalog describes it."""

    slug: str
    display_name: str
    description: str
    base_instructions: str
    supported_reasoning_levels: list[Any]
    shell_type: str
    visibility: str
    supported_in_api: bool
    priority: int
    supports_reasoning_summaries: bool
    support_verbosity: bool
    apply_patch_tool_type: str
    truncation_policy: TruncationPolicy
    supports_parallel_tool_calls: bool
    context_window: int
    experimental_supported_tools: list[Any]


class CodexCatalog(TypedDict):
    models: list[CodexModel]


# What Codex uses as its system prompt when it reads the model from triode's catalog: a local
# model's context is small next to Codex's own ~17,000-character instructions.
CODEX_INSTRUCTIONS = (
    "You are a coding agent running in a terminal. Use the tools to inspect and change the "
    "workspace, run commands to check your work, and answer briefly.")
# Codex's catalog needs a context window; a model whose files state none gets this.
CODEX_DEFAULT_CONTEXT = 4096


@route("/models", methods=["GET"])
@documented(Operation(
    "List the models", ModelList | CodexCatalog,
    query=(Param("client_version", str, "Codex CLI's version: answer with Codex's model "
                 "catalog instead"),)))
async def list_models() -> Response:
    """OpenAI's model list, every model this caller may use with its state; with
    `client_version` in the query (Codex CLI fetching its model catalog from a provider's
    `model_catalog_url`), Codex's catalog shape instead."""
    views = await visible_views()
    if "client_version" in request.args:
        catalog: CodexCatalog = {"models": [codex_catalog_entry(v, i + 1)
                                            for i, v in enumerate(views)]}
        return json_response(catalog)
    models: ModelList = {"object": "list", "data": [model_object(v) for v in views]}
    return json_response(models)


@route("/models/<path:model_id>", methods=["GET"])
@documented(Operation("Retrieve a model", ModelObject, errors=(404,)))
async def retrieve_model(model_id: str) -> Response:
    """A model under any name a request's `model` may use; else 404."""
    return json_response(model_object(await view_of(model_id)))


@route("/models/<path:model_id>/load", methods=["POST"])
@documented(Operation("Load a model (admin)", ModelObject, errors=(403, 404, 500, 503)))
async def load_model(model_id: str) -> Response:
    """Loads the model (unloading idle ones to make room) and answers once it is loaded;
    it then stays for its keep-alive. A model that is loaded already is answered at once."""
    check_admin()
    h = handles()
    spec = h.models.lookup(model_id, caller())
    await h.models.load(spec)
    return json_response(model_object(await view_of(model_id)))


@route("/models/<path:model_id>/unload", methods=["POST"])
@documented(Operation("Unload a model (admin)", ModelObject, errors=(403, 404, 409)))
async def unload_model(model_id: str) -> Response:
    """Unloads the model and answers once its memory is back (409 while it is in use: a
    model is never unloaded under a request)."""
    check_admin()
    h = handles()
    spec = h.models.lookup(model_id, caller())
    await h.models.unload(spec)
    return json_response(model_object(await view_of(model_id)))


def check_admin() -> None:
    """The admin routes: any caller the API key let in, or, with a keys file, a tenant
    whose entry says `"admin": true`."""
    if handles().tenants.path is not None and not caller().tenant.admin:
        raise Forbidden("loading and unloading models needs an admin key (a tenant with "
                        "\"admin\": true in --api-keys-file)")


async def visible_views() -> list[ModelView]:
    h, who = handles(), caller()
    return [v for v in await h.models.views() if who.tenant.may_use(v.spec.names)]


async def view_of(model_id: str) -> ModelView:
    h = handles()
    spec = h.models.lookup(model_id, caller())
    return next(v for v in await h.models.views() if v.spec is spec)


def context_window(view: ModelView) -> int | None:
    return view.context_window or native_context(view.spec)


def model_object(view: ModelView) -> ModelObject:
    h = handles()
    vision = view.info is not None and view.info.vision
    return {"id": view.spec.id, "object": "model", "created": h.started_at,
            "owned_by": "triode", "context_window": context_window(view),
            "input_modalities": ["text", "image", "file"] if vision else ["text", "file"],
            "status": view.status,  # type: ignore[typeddict-item]
            "error": view.error, "pinned": view.spec.pinned,
            "memory_bytes": view.memory_bytes, "reserved_bytes": view.reserved_bytes,
            "expires_at": view.expires_at,
            "keep_alive": view.keep_alive, "aliases": [n for n in view.spec.names[1:] if "/" not in n]}


def codex_catalog_entry(view: ModelView, priority: int) -> CodexModel:
    """A model as Codex CLI's catalog describes a model: what it may send (no reasoning
    levels, function tools and a freeform apply_patch) and its context window, which
    Codex's auto-compaction works from."""
    return {"slug": view.spec.id, "display_name": view.spec.id,
            "description": "served by triode", "base_instructions": CODEX_INSTRUCTIONS,
            "supported_reasoning_levels": [], "shell_type": "shell_command",
            "visibility": "list", "supported_in_api": True, "priority": priority,
            "supports_reasoning_summaries": False, "support_verbosity": False,
            "apply_patch_tool_type": "freeform",
            "truncation_policy": {"mode": "tokens", "limit": 10000},
            "supports_parallel_tool_calls": True,
            "context_window": context_window(view) or CODEX_DEFAULT_CONTEXT,
            "experimental_supported_tools": []}
