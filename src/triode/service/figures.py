"""What the server's actors report now, read once per `/health`, `/metrics` scrape or `/ui`
snapshot (`gather`), and `/health`'s report of it (`health`).

The actors stay the owners of their figures: this asks each by message and keeps no copy.
The HTTP layer renders the same `Figures` three ways (JSON, Prometheus' text format, the live
page's snapshot) and computes nothing of its own.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

import attrs
import trio

from ..storage.budget import BudgetStatistics
from ..actors.messages import DistributedStatistics, ModelStatistics
from ..actors.model import idle_statistics
from ..actors.models import ModelsHandle, ModelView
from ..actors.registry import RegistryHandle, RegistryStatistics
from ..errors import StoreUnavailable
from ..model.speculative_stats import SpeculationStatistics
from .stores import Stores


@attrs.frozen
class Figures:
    model: ModelStatistics      # the default model's (a model not loaded: all zero)
    models: tuple[ModelView, ...]   # every available model, the default first
    registry: RegistryStatistics
    stores: dict[str, BudgetStatistics | None]   # None: a shared store that cannot be reached
    tasks: int                                   # trio tasks the process runs

    @property
    def stores_reachable(self) -> bool:
        return all(st is not None for st in self.stores.values())

    @property
    def default(self) -> ModelView:
        return self.models[0]

    @property
    def ready(self) -> bool:
        """Every loaded model's engine runs and every store answers: what a readiness
        probe asks."""
        engines = all(v.statistics.engine_alive for v in self.models
                      if v.statistics is not None)
        return engines and self.stores_reachable


async def gather(models: ModelsHandle, registry: RegistryHandle, stores: Stores) -> Figures:
    views = tuple(await models.views())
    default = views[0].statistics or idle_statistics()
    return Figures(default, views, await registry.statistics(),
                   await reachable_store_statistics(stores), count_tasks())


async def reachable_store_statistics(stores: Stores) -> dict[str, BudgetStatistics | None]:
    """Each store's statistics, None for a store that cannot be reached (Redis down): a
    scrape still reports everything else, and `triode_store_up` says which one is down."""
    stats: dict[str, BudgetStatistics | None] = {}
    for name, store in (("responses", stores.responses),
                        ("conversations", stores.conversations),
                        ("reasoning_echo", stores.reasoning)):
        try:
            stats[name] = await store.statistics()
        except StoreUnavailable:
            stats[name] = None
    return stats


def count_tasks() -> int:
    """How many trio tasks the process runs now (the soak test checks none are left behind)."""
    root = trio.lowlevel.current_root_task()
    count, todo = 0, [] if root is None else [root]
    while todo:
        task = todo.pop()
        count += 1
        todo += [child for nursery in task.child_nurseries for child in nursery.child_tasks]
    return count


# ---- /health's report --------------------------------------------------------------------

class StoreHealth(TypedDict):
    kind: Literal["memory", "redis", "sqlite"]
    reachable: bool


class Slots(TypedDict):
    total: int
    busy: int
    free: int


class Queue(TypedDict):
    depth: int
    max: int


class Generation(TypedDict):
    steps: int
    tokens: int
    admitted: int
    rejected: int
    rendering: int


class GuardHealth(TypedDict):
    width: int                # batch width (rows)
    state: str                # on, off, probing
    windows: int              # windows judged
    losses: int               # losing windows in a row
    ratio: float | None       # the last window's rate against plain decoding's


class SpeculationHealth(TypedDict):
    """Speculative decoding's figures (docs/observability.md)."""

    steps: int                # decode steps
    speculative_steps: int    # ... that verified drafts
    drafted_tokens: int
    accepted_tokens: int
    acceptance_rate: float    # accepted / drafted
    tokens_per_step: float    # tokens a sequence got per decode step (1 without drafts)
    compactions: int
    guard: list[GuardHealth]  # the payoff guard, per batch width seen


class ResponsesHealth(TypedDict):
    live: int
    started: int
    background_jobs: int
    background_max_jobs: int


class ModelHealth(TypedDict):
    """One available model (docs/models.md)."""

    id: str
    status: str                # unloaded, loading, loaded, unloading, failed
    error: str | None          # why it failed
    pinned: bool
    memory_bytes: int          # its weights: measured when it loaded (MLX's counter), else
                               # its files' size
    memory_measured: bool
    reserved_bytes: int        # what admission counts: its weights, KV and prompt-cache budgets
    load_seconds: float | None
    loads: int
    leases: int                # requests holding it (running or queued)
    waiting: int               # requests waiting for its load
    idle_seconds: float | None
    expires_at: float | None   # when it unloads if still idle (unix time); None: never
    keep_alive: float          # seconds; -1: never unloads when idle
    context_window: int | None
    engine_alive: bool
    slots_busy: int
    tokens: int


class Health(TypedDict):
    """Readiness and every actor's statistics (docs/observability.md). The top-level
    model fields are the default model's (the first --model); `models` has each one."""

    status: Literal["ok", "degraded"]
    store: StoreHealth
    model: str
    models: list[ModelHealth]
    context_window: int
    weights: str          # how the weights run (and were stored): "float32 (stored as 4/8-bit)"
    blas: str
    blas_threads: int | None
    engine_alive: bool
    engine_restarts: int
    engine_error: str | None
    slots: Slots
    queue: Queue
    generation: Generation
    prompt_cache: dict[str, int]                 # PromptCacheStatistics' fields
    speculation: SpeculationHealth | None        # None: --speculative off
    distributed: DistributedHealth | None        # None: one process (no --distributed)
    responses: ResponsesHealth
    tasks: int
    stores: dict[str, dict[str, Any] | None]     # BudgetStatistics' fields; None: unreachable


def model_health(v: ModelView) -> ModelHealth:
    st = v.statistics
    return {"id": v.spec.id, "status": v.status, "error": v.error, "pinned": v.spec.pinned,
            "memory_bytes": v.memory_bytes, "memory_measured": v.measured,
            "reserved_bytes": v.reserved_bytes,
            "load_seconds": None if v.load_seconds is None else round(v.load_seconds, 3),
            "loads": v.loads, "leases": v.leases, "waiting": v.waiting,
            "idle_seconds": None if v.idle_seconds is None else round(v.idle_seconds, 3),
            "expires_at": v.expires_at, "keep_alive": v.keep_alive,
            "context_window": v.context_window,
            "engine_alive": st is not None and st.engine_alive,
            "slots_busy": 0 if st is None else st.slots_busy,
            "tokens": 0 if st is None else st.tokens_generated}


def health(f: Figures, stores: Stores, *, blas: str) -> Health:
    """`/health`'s body."""
    m, registry, info = f.model, f.registry, f.default.info
    return {
        "status": "ok" if f.ready else "degraded",
        "store": {"kind": stores.responses.kind, "reachable": f.stores_reachable},
        "model": f.default.spec.id,
        "models": [model_health(v) for v in f.models],
        "context_window": f.default.context_window or 0,
        "weights": "not loaded" if info is None else info.weights,
        "blas": blas,
        "blas_threads": None if info is None else info.blas_threads,
        "engine_alive": m.engine_alive,
        "engine_restarts": m.engine_restarts,
        "engine_error": m.engine_error,
        "slots": {"total": m.slots_total, "busy": m.slots_busy,
                  "free": m.slots_total - m.slots_busy},
        "queue": {"depth": m.queue_depth, "max": m.queue_max},
        "generation": {"steps": m.steps, "tokens": m.tokens_generated,
                       "admitted": m.requests_admitted,
                       "rejected": m.requests_rejected, "rendering": m.rendering},
        "prompt_cache": attrs.asdict(m.prompt_cache),
        "speculation": speculation_health(m.speculation),
        "distributed": distributed_health(m.distributed),
        "responses": {"live": registry.live, "started": registry.started,
                      "background_jobs": registry.background_jobs,
                      "background_max_jobs": registry.background_max_jobs},
        "tasks": f.tasks,
        "stores": {store: None if st is None else attrs.asdict(st)
                   for store, st in f.stores.items()},
    }


class RankHealth(TypedDict):
    rank: int
    steps: int
    step_seconds: float
    record_seconds: float


class DistributedHealth(TypedDict):
    """--distributed: the group of ranks (docs/deployment.md)."""

    mode: str
    ranks: list[RankHealth]
    failure: str | None


def distributed_health(d: DistributedStatistics | None) -> DistributedHealth | None:
    if d is None:
        return None
    return {"mode": d.mode, "failure": d.failure,
            "ranks": [{"rank": r.rank, "steps": r.steps,
                       "step_seconds": round(r.step_seconds, 6),
                       "record_seconds": round(r.record_seconds, 6)} for r in d.ranks]}


def speculation_health(st: SpeculationStatistics | None) -> SpeculationHealth | None:
    if st is None:
        return None
    return {"steps": st.plain_steps + st.speculative_steps,
            "speculative_steps": st.speculative_steps, "drafted_tokens": st.drafted,
            "accepted_tokens": st.accepted, "acceptance_rate": round(st.acceptance_rate, 4),
            "tokens_per_step": round(st.tokens_per_step, 4), "compactions": st.compactions,
            "guard": [{"width": g.width, "state": g.state, "windows": g.windows,
                       "losses": g.losses,
                       "ratio": None if g.ratio is None else round(g.ratio, 4)}
                      for g in st.guard]}
