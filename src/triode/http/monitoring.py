"""Monitoring routes: `/health` (liveness and every actor's statistics, as JSON) and
`/metrics` (the same figures in Prometheus text format)."""

from __future__ import annotations

import attrs
import trio
from quart import Response

from .body import json_response
from .routes import handles, route


@route("/health", methods=["GET"])
async def health() -> Response:
    h = handles()
    model = await h.model.statistics()
    registry = await h.registry.statistics()
    stores = {name: attrs.asdict(await store.statistics())
              for name, store in (("responses", h.responses), ("conversations", h.conversations),
                                  ("reasoning_echo", h.echo))}
    return json_response({
        "status": "ok" if model.engine_alive else "degraded",
        "model": h.model_names[0],
        "blas": h.blas,
        "blas_threads": h.model.info.blas_threads,
        "engine_alive": model.engine_alive,
        "engine_restarts": model.engine_restarts,
        "engine_error": model.engine_error,
        "slots": {"total": model.slots_total, "busy": model.slots_busy,
                  "free": model.slots_total - model.slots_busy},
        "queue": {"depth": model.queue_depth, "max": model.queue_max},
        "generation": {"steps": model.steps, "tokens": model.tokens_generated,
                       "admitted": model.requests_admitted,
                       "rejected": model.requests_rejected, "rendering": model.rendering},
        "prompt_cache": attrs.asdict(model.prompt_cache),
        "responses": {"live": registry.live, "started": registry.started,
                      "background_jobs": registry.background_jobs,
                      "background_max_jobs": registry.background_max_jobs},
        "tasks": count_tasks(),
        "stores": stores,
    })


def count_tasks() -> int:
    """How many trio tasks the process runs now (the soak test checks none are left behind)."""
    root = trio.lowlevel.current_root_task()
    count, todo = 0, [] if root is None else [root]
    while todo:
        task = todo.pop()
        count += 1
        todo += [child for nursery in task.child_nurseries for child in nursery.child_tasks]
    return count


@route("/metrics", methods=["GET"])
async def metrics() -> Response:
    h = handles()
    model = await h.model.statistics()
    registry = await h.registry.statistics()
    rows = [
        ("triode_slots_total", "gauge", "generation slots", model.slots_total),
        ("triode_slots_busy", "gauge", "generation slots in use", model.slots_busy),
        ("triode_queue_depth", "gauge", "requests waiting for a slot", model.queue_depth),
        ("triode_engine_alive", "gauge", "1 while the engine thread runs", int(model.engine_alive)),
        ("triode_engine_restarts_total", "counter", "fresh engines started after a failure",
         model.engine_restarts),
        ("triode_engine_steps_total", "counter", "engine steps with output", model.steps),
        ("triode_generated_tokens_total", "counter", "tokens generated", model.tokens_generated),
        ("triode_requests_admitted_total", "counter", "requests given a slot",
         model.requests_admitted),
        ("triode_requests_rejected_total", "counter", "requests refused with 503",
         model.requests_rejected),
        ("triode_responses_live", "gauge", "responses with a live supervisor", registry.live),
        ("triode_background_jobs", "gauge", "active background responses",
         registry.background_jobs),
    ]
    for name, store in (("responses", h.responses), ("conversations", h.conversations)):
        st = await store.statistics()
        rows += [
            (f"triode_{name}_store_entries", "gauge", f"entries in the {name} store", st.entries),
            (f"triode_{name}_store_bytes", "gauge", f"retained JSON bytes in the {name} store",
             st.bytes),
        ]
        rows += [(f"triode_{name}_store_evictions_{cause}_total", "counter",
                  f"{name} store evictions by {cause}", count)
                 for cause, count in attrs.asdict(st.evictions).items()]
    lines = []
    for name, kind, help_, value in rows:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {value}"]
    return Response("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4")
