"""The live page: `GET /ui` (static HTML, script and style from `static/`) and its stream,
`GET /ui/events` (server-sent events: one `snapshot` on connect, then one whenever what it
shows changed, at most every PUSH_SECS, a `heartbeat` after HEARTBEAT_SECS of quiet, and a
`shutdown` that ends it when the server starts shutting down).

The page's files hold no data and are served without auth (a browser cannot send an
Authorization header when it navigates); the stream is an API route like any other, behind
`--api-key`: the page reads it with `fetch()` and the key the user typed in, kept in the
tab's sessionStorage (docs/observability.md).

A snapshot is built from the actors' answers, asked by message as `/health` asks them: the
model actor's and the stores' statistics, the registry's overview (live supervisors, recent
ends), the monitor's history, the job board's jobs (every process on a shared store), and the
access log's open connections. What one caller may see goes through `visible_to`.
"""

from __future__ import annotations

import importlib.resources
import time
from typing import Any, AsyncIterator

import attrs
import trio
from quart import Response, current_app, request

from ..actors.supervisor import ResponseSummary
from ..errors import StoreUnavailable
from ..service import figures
from ..service.remote import RemoteJob
from ..system import Handles
from ..tenants import Caller, unscoped
from .access import AccessLog, Connection
from .caller import caller
from .body import json_response
from .contract import Operation, documented
from . import sse
from .routes import api, sse_response

PUSH_SECS = 0.25        # a snapshot at most this often
HEARTBEAT_SECS = 5.0    # a quiet stream says it is alive this often
REMOTE_SECS = 1.0       # how often the job board is read for other processes' jobs

STATIC = importlib.resources.files(__package__) / "static"
# Served without auth: the page's shell holds no data (the stream does, behind the key).
OPEN_PATHS = ("/ui", "/ui/ui.js", "/ui/ui.css")
# Only the page's own files, and only fetch() to this origin; no inline script or style.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
}


# ---- who asks, and what they may see ------------------------------------------------------

def visible_to(who: Caller, key: str) -> bool:
    """THE TENANT FILTER, the one place the page decides what a caller sees: whether the
    response the registry or the job board names `key` (tenants.scoped) is the caller's
    tenant's. Another tenant's responses do not exist for it, here as on the API. The
    server-wide figures (slots, queue, stores' totals, counts) are shown to every caller,
    as /health shows them."""
    return who.owns(key)


# ---- the page ------------------------------------------------------------------------------

def static_file(name: str, content_type: str) -> Response:
    return Response((STATIC / name).read_bytes(), content_type=content_type,
                    headers=PAGE_HEADERS)


@documented(Operation("The live page (docs/observability.md)", str, media_type="text/html",
                      public=True))
async def ui_page() -> Response:
    return static_file("ui.html", "text/html; charset=utf-8")


@documented(Operation("The live page's script", str, media_type="text/javascript",
                      public=True))
async def ui_script() -> Response:
    return static_file("ui.js", "text/javascript; charset=utf-8")


@documented(Operation("The live page's style sheet", str, media_type="text/css",
                      public=True))
async def ui_style() -> Response:
    return static_file("ui.css", "text/css; charset=utf-8")


api.add_url_rule("/ui", view_func=ui_page, methods=["GET"])
api.add_url_rule("/ui/ui.js", view_func=ui_script, methods=["GET"])
api.add_url_rule("/ui/ui.css", view_func=ui_style, methods=["GET"])


# ---- the snapshot ----------------------------------------------------------------------------

def short_worker(worker_id: str | None) -> str:
    return "-" if worker_id is None else worker_id[:8]


def connections_json(found: list[Connection]) -> list[dict[str, Any]]:
    return [attrs.asdict(c) for c in found]


def mcp_calls_json(s: ResponseSummary) -> list[dict[str, Any]]:
    """A response's MCP calls (tool, start, end, status): never their arguments or output."""
    return [{"tool": tool, "started_at": started, "ended_at": ended, "status": status}
            for tool, started, ended, status in s.mcp_calls]


def live_entry(s: ResponseSummary, worker: str, open_: list[Connection]) -> dict[str, Any]:
    return {"id": s.response_id, "status": s.status, "background": s.background,
            "store": s.store, "worker": worker, "here": True, "tokens": s.output_tokens,
            "timeline": [list(t) for t in s.timeline],
            "connections": connections_json(open_), "mcp_calls": mcp_calls_json(s)}


def recent_entry(s: ResponseSummary, worker: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": s.response_id, "status": s.status, "background": s.background,
        "store": s.store, "worker": worker, "ttft": s.ttft,
        "ended_at": s.timeline[-1][1], "started_at": s.timeline[0][1],
        # A background job is stored even with store: false (for its ephemeral TTL).
        "stored": s.store or s.background, "usage": None, "cached_share": None,
        "mcp_calls": mcp_calls_json(s)}
    if s.usage is not None:
        used = s.usage
        entry["usage"] = {"input_tokens": used.input_tokens,
                          "cached_tokens": used.cached_tokens,
                          "output_tokens": used.output_tokens}
        entry["cached_share"] = used.cached_tokens / used.input_tokens \
            if used.input_tokens else None
    return entry


class RemoteJobs:
    """The other processes' jobs, read from the job board every REMOTE_SECS (one per
    stream: each stream reads on from where it was)."""

    def __init__(self, h: Handles, who: Caller) -> None:
        """`h`: the whole server's handles (the board and the stores name jobs by their
        tenant's keys); only `who`'s are read and shown."""
        self._h = h
        self._who = who
        self._jobs: dict[str, tuple[str, RemoteJob]] = {}
        self._read_at = -REMOTE_SECS

    async def entries(self, local: set[str]) -> list[dict[str, Any]]:
        board = self._h.board
        if board is None:
            return []
        if trio.current_time() - self._read_at >= REMOTE_SECS:
            self._read_at = trio.current_time()
            try:
                await self._read(local)
            except StoreUnavailable:
                pass   # the store figures say it is down; the last jobs read stay shown
        return [{"id": unscoped(key)[1], "status": job.status, "background": job.background,
                 "store": job.store, "worker": short_worker(owner), "here": False,
                 "tokens": job.deltas, "timeline": job.timeline, "connections": [],
                 "mcp_calls": []}
                for key, (owner, job) in self._jobs.items()
                if key not in local and visible_to(self._who, key)]

    async def _read(self, local: set[str]) -> None:
        board = self._h.board
        assert board is not None
        found = {key: owner for key, owner in await board.jobs()
                 if owner is not None and owner != board.worker_id and key not in local
                 and visible_to(self._who, key)}
        self._jobs = {rid: entry for rid, entry in self._jobs.items() if rid in found}
        for rid, owner in found.items():
            if rid not in self._jobs:
                record = await self._h.stores.responses.get(rid)
                if record is None:
                    continue
                self._jobs[rid] = (owner, RemoteJob(board, record, key=rid, keep_events=False))
            await self._jobs[rid][1].read_on()


def store_json(st: Any) -> dict[str, Any] | None:
    return None if st is None else attrs.asdict(st)


async def snapshot(h: Handles, access: AccessLog, who: Caller, remote: RemoteJobs
                   ) -> dict[str, Any]:
    """Everything the page shows, but the plots' history (`history`), as the actors answer
    now."""
    f = await figures.gather(h.models, h.registry, h.stores)
    model, stores = f.model, f.stores
    overview = await h.registry.overview()
    here = short_worker(h.board.worker_id) if h.board is not None else "this process"
    open_ = access.connections()
    mine = [s for s in overview.live if visible_to(who, s.key)]
    live = [live_entry(s, here, open_.get(s.response_id, [])) for s in mine]
    live += await remote.entries({s.key for s in overview.live})
    recent = [recent_entry(s, here) for s in overview.recent if visible_to(who, s.key)]
    responses = stores["responses"]
    cache = model.prompt_cache
    prompt_tokens = model.generation.prompt_tokens
    return {
        "model": f.default.spec.id,
        "models": [figures.model_health(v) for v in f.models
                   if who.tenant.may_use(v.spec.names)],
        "worker": here, "started_at": h.started_at,
        "store": h.stores.responses.kind, "shared": h.board is not None,
        # The cancel path answers 400 while the response store is off (entries 0).
        "cancellable": responses is not None and responses.max_entries > 0,
        "engine": {"alive": model.engine_alive, "restarts": model.engine_restarts,
                   "error": model.engine_error},
        "distributed": figures.distributed_health(model.distributed),
        "slots": {"total": model.slots_total, "busy": model.slots_busy},
        "queue": {"depth": model.queue_depth, "max": model.queue_max},
        "rendering": model.rendering, "tasks": f.tasks,
        "generation": {"tokens": model.tokens_generated, "steps": model.steps,
                       "admitted": model.requests_admitted,
                       "rejected": model.requests_rejected},
        "prompt_cache": {**attrs.asdict(cache), "prompt_tokens": prompt_tokens,
                         "hit_share": cache.cached_tokens / prompt_tokens
                         if prompt_tokens else None},
        "registry": attrs.asdict(f.registry),
        "stores": {name: store_json(st) for name, st in stores.items()},
        "draining": overview.draining,
        "live": live,
        "recent": recent,
    }


async def history(h: Handles, after: float) -> list[list[Any]]:
    """The monitor's samples after `after`: [at, tokens/s, ttft, queue, busy, hit share]."""
    if h.monitor is None:
        return []
    return [[s.at, s.tokens_per_second, s.ttft, s.queue_depth, s.slots_busy,
             s.cache_hit_share] for s in await h.monitor.history(after)]


@documented(Operation(
    "The live page's figures: one snapshot (JSON), or with `Accept: text/event-stream` "
    "a stream of them", dict[str, Any], stream=True))
async def ui_events() -> Response:
    """A snapshot of what the live page shows. With `Accept: text/event-stream`: `snapshot`
    events (the first on connect, then one whenever it changed, at most every 250 ms, each
    with the plots' samples since the last, and the recent list only when it changed), a
    `heartbeat` after 5 s without one, and a
    last `shutdown` event when the server starts shutting down."""
    # The whole server's handles: the registry, the stores and the board name every
    # tenant's responses, and `visible_to` picks the caller's.
    h: Handles = current_app.config["TRIODE_HANDLES"]
    access: AccessLog = current_app.config["TRIODE_ACCESS"]
    who = caller()

    if "text/event-stream" not in request.headers.get("Accept", ""):
        snap = await snapshot(h, access, who, RemoteJobs(h, who))
        return json_response({**snap, "now": time.time(), "history": await history(h, 0.0)})

    async def frames() -> AsyncIterator[bytes]:
        remote = RemoteJobs(h, who)
        shown: dict[str, Any] | None = None
        after = 0.0
        quiet_since = trio.current_time()
        while True:
            snap = await snapshot(h, access, who, remote)
            samples = await history(h, after)
            if samples:
                after = samples[-1][0]
            if snap != shown or samples:
                payload = {**snap, "now": time.time(), "history": samples}
                if shown is not None and snap["recent"] == shown["recent"]:
                    del payload["recent"]   # most of a snapshot's bytes; the page keeps it
                shown = snap
                yield sse.frame("snapshot", payload)
                quiet_since = trio.current_time()
            if snap["draining"]:
                # The server is shutting down: the page is told, and the stream does not
                # hold the shutdown up.
                yield sse.frame("shutdown", {"now": time.time()})
                return
            elif trio.current_time() - quiet_since >= HEARTBEAT_SECS:
                yield sse.frame("heartbeat", {"now": time.time()})
                quiet_since = trio.current_time()
            await trio.sleep(PUSH_SECS)

    return await sse_response(frames())


api.add_url_rule("/ui/events", view_func=ui_events, methods=["GET"])
