"""Monitoring routes: `/health` (liveness and every actor's statistics, as JSON) and
`/metrics` (the same figures, and the HTTP ones, in Prometheus' text format).

Each answer gathers the actors' figures once (`service/figures.py`, which `/ui` reads too)
and renders them; `/metrics` with prometheus_client's metric families. No second copy of a
figure is kept here. Names follow Prometheus' conventions: a counter ends in `_total`, a unit is
spelled out (`_seconds`, `_bytes`, `_tokens`), a capacity is a gauge of its own, and one
quantity split by a cause is one metric with a label (docs/observability.md lists them).
"""

from __future__ import annotations

from typing import Callable, Iterable

import attrs
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (CounterMetricFamily, GaugeMetricFamily,
                                            HistogramMetricFamily, Metric)
from prometheus_client.process_collector import ProcessCollector
from quart import Response, current_app

from ..storage.budget import BudgetStatistics
from ..actors.messages import DistributedStatistics, HistogramStatistics
from ..actors.mcp import McpStatistics, ServerFigures
from ..actors.models import ModelView
from ..actors.registry import RegistryStatistics
from ..model.lockstep import RankFigures
from ..model.speculative_stats import SpeculationStatistics
from ..service import figures
from ..system import Handles
from .access import AccessLog
from .body import json_response
from .contract import Operation, documented
from .routes import handles, route

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The process' CPU seconds, resident memory and open files (Linux /proc; nothing elsewhere).
PROCESS = ProcessCollector(registry=None)
EVICTION_REASONS = ("ttl", "lru", "bytes", "oversize")   # Evictions' fields but `deleted`


@route("/health", methods=["GET"])
@documented(Operation("Readiness and statistics (503: degraded, with the same body)",
                      figures.Health,
                      answers={503: ("Degraded: the engine or a shared store is down.",
                                     figures.Health)},
                      public=True))
async def health() -> Response:
    """503 when not ready (the engine is down, or a shared store cannot be reached): a
    readiness probe fails; the body still reports everything else."""
    h = handles()
    f = await figures.gather(h.models, h.registry, h.stores)
    body = figures.health(f, h.stores, blas=h.blas)
    return json_response(body, 200 if f.ready else 503)


@route("/metrics", methods=["GET"])
@documented(Operation("Prometheus metrics", str, media_type="text/plain"))
async def metrics() -> Response:
    h = handles()
    access: AccessLog = current_app.config["TRIODE_ACCESS"]
    f = await figures.gather(h.models, h.registry, h.stores)
    families = [
        *model_metrics(h, f),
        *models_metrics(f.models),
        *registry_metrics(f.registry),
        *store_metrics(f.stores),
        *http_metrics(access),
        *(mcp_metrics(await h.mcp.statistics()) if h.mcp is not None else []),
        gauge("triode_tasks", "trio tasks the process runs", f.tasks),
    ]
    return Response(generate_latest(Families([*families, *PROCESS.collect()])),
                    content_type=CONTENT_TYPE)


@attrs.frozen
class Families:
    """The registry `generate_latest` renders: this scrape's families, collected once."""

    families: list[Metric]

    def collect(self) -> Iterable[Metric]:
        return self.families


def gauge(name: str, help_: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_, value=value)


def counter(name: str, help_: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, help_, value=value)


def labelled(family: GaugeMetricFamily | CounterMetricFamily,
             rows: Iterable[tuple[list[str], float]]) -> GaugeMetricFamily | CounterMetricFamily:
    for labels, value in rows:
        family.add_metric(labels, value)
    return family


def histogram_buckets(st: HistogramStatistics) -> list[tuple[str, float]]:
    return [*((repr(float(bound)), n) for bound, n in zip(st.bounds, st.cumulative)),
            ("+Inf", st.count)]


def histogram(name: str, help_: str, st: HistogramStatistics) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, help_, buckets=histogram_buckets(st), sum_value=st.sum)


def mcp_metrics(st: McpStatistics) -> list[Metric]:
    """The MCP servers' listings, calls, failures and call time, per server label."""
    def per_label(family: GaugeMetricFamily | CounterMetricFamily,
                  value: Callable[[ServerFigures], float]) -> Metric:
        return labelled(family, (([f.label], value(f)) for f in st.servers))

    return [
        gauge("triode_mcp_connections", "MCP connections open (per tenant, server and "
              "credentials)", st.connections),
        per_label(CounterMetricFamily("triode_mcp_listings", "MCP tools/list requests",
                                      labels=["server_label"]), lambda f: f.listings),
        per_label(CounterMetricFamily("triode_mcp_listing_failures", "MCP listings that "
                                      "failed", labels=["server_label"]),
                  lambda f: f.listing_failures),
        per_label(CounterMetricFamily("triode_mcp_calls", "MCP tool calls run",
                                      labels=["server_label"]), lambda f: f.calls),
        per_label(CounterMetricFamily("triode_mcp_call_failures", "MCP tool calls that "
                                      "ended with an error", labels=["server_label"]),
                  lambda f: f.failures),
        per_label(CounterMetricFamily("triode_mcp_call_seconds", "seconds MCP tool calls "
                                      "took, in all", labels=["server_label"]),
                  lambda f: f.seconds),
    ]


def models_metrics(views: Iterable[ModelView]) -> list[Metric]:
    """Each available model's state, memory, leases and load figures (label `model`)."""
    views = list(views)
    status = GaugeMetricFamily("triode_model_status", "each model's state: 1 for its status",
                               labels=["model", "status"])
    for v in views:
        status.add_metric([v.spec.id, v.status], 1)

    def per_model(family: GaugeMetricFamily | CounterMetricFamily,
                  value: Callable[[ModelView], float | None]) -> Metric:
        return labelled(family, (([v.spec.id], x) for v in views
                                 if (x := value(v)) is not None))

    return [
        status,
        per_model(GaugeMetricFamily("triode_model_memory_bytes", "a model's weights in "
                                    "memory (measured at its load; before one, its files)",
                                    labels=["model"]), lambda v: v.memory_bytes),
        per_model(GaugeMetricFamily("triode_model_reserved_bytes", "what --max-model-memory "
                                    "counts for a model: its weights, KV-cache and "
                                    "prompt-cache budgets", labels=["model"]),
                  lambda v: v.reserved_bytes),
        per_model(GaugeMetricFamily("triode_model_leases", "requests holding a model "
                                    "(running or queued)", labels=["model"]),
                  lambda v: v.leases),
        per_model(GaugeMetricFamily("triode_model_waiting", "requests waiting for a "
                                    "model's load", labels=["model"]), lambda v: v.waiting),
        per_model(CounterMetricFamily("triode_model_loads", "loads started, per model",
                                      labels=["model"]), lambda v: v.loads),
        per_model(GaugeMetricFamily("triode_model_load_seconds", "a model's last load's "
                                    "duration", labels=["model"]), lambda v: v.load_seconds),
        per_model(GaugeMetricFamily("triode_model_idle_seconds", "seconds since a loaded "
                                    "model's last request ended", labels=["model"]),
                  lambda v: v.idle_seconds),
        per_model(CounterMetricFamily("triode_model_generated_tokens", "tokens a model "
                                      "generated since it loaded", labels=["model"]),
                  lambda v: None if v.statistics is None else v.statistics.tokens_generated),
    ]


def model_metrics(h: Handles, f: figures.Figures) -> list[Metric]:
    """The default model's figures (the first --model), as with one model."""
    model, info = f.model, f.default.info
    gen = model.generation
    cache = model.prompt_cache
    model_info = GaugeMetricFamily("triode_model_info", "the model served (always 1)",
                                   labels=["model", "path", "blas", "weights"])
    model_info.add_metric([f.default.spec.id, f.default.spec.path, h.blas,
                           "not loaded" if info is None else info.weights], 1)
    families: list[Metric] = [
        model_info,
        gauge("triode_context_window_tokens", "the model's context window",
              f.default.context_window or 0),
        gauge("triode_slots_capacity", "generation slots (--parallel)", model.slots_total),
        gauge("triode_slots_busy", "generation slots in use", model.slots_busy),
        gauge("triode_queue_depth", "requests waiting for a slot", model.queue_depth),
        gauge("triode_queue_capacity", "requests that may wait for a slot (--max-queue)",
              model.queue_max),
        gauge("triode_rendering", "chat templates being rendered (or waiting to be)",
              model.rendering),
        gauge("triode_engine_alive", "1 while the engine thread runs", int(model.engine_alive)),
        counter("triode_engine_restarts_total", "fresh engines started after a failure",
                model.engine_restarts),
        counter("triode_engine_steps_total", "engine steps with output", model.steps),
        counter("triode_requests_admitted_total", "generation requests given a slot",
                model.requests_admitted),
        counter("triode_requests_rejected_total",
                "generation requests refused with 503 (queue full)", model.requests_rejected),
        counter("triode_sequences_started_total", "sequences that reached their first token",
                gen.started),
        counter("triode_prompt_tokens_total", "prompt tokens of started sequences (cached "
                "ones included)", gen.prompt_tokens),
        counter("triode_cached_prompt_tokens_total",
                "prompt tokens the prompt cache supplied (not prefilled)", cache.cached_tokens),
        counter("triode_generated_tokens_total", "tokens generated", model.tokens_generated),
        labelled(CounterMetricFamily("triode_sequences_finished_total",
                                     "sequences by how they ended", labels=["outcome"]),
                 (([outcome], n) for outcome, n in gen.outcomes.items())),
        histogram("triode_queue_wait_seconds", "from asking for a slot to getting one",
                  gen.queue_wait),
        histogram("triode_time_to_first_token_seconds",
                  "from asking for a slot to the first token (queue wait and prefill)",
                  gen.time_to_first_token),
        histogram("triode_time_per_output_token_seconds",
                  "per token after the first, of each finished sequence",
                  gen.time_per_output_token),
        histogram("triode_generation_duration_seconds",
                  "from asking for a slot to the last token, of each finished sequence",
                  gen.duration),
        gauge("triode_prompt_cache_capacity_bytes", "prompt cache budget "
              "(--prompt-cache-bytes; 0: off)", cache.max_bytes),
        gauge("triode_prompt_cache_bytes", "bytes of KV cache kept for reuse", cache.bytes),
        gauge("triode_prompt_cache_entries", "sequences kept in the prompt cache",
              cache.entries),
        counter("triode_prompt_cache_hits_total",
                "sequences whose prefill started from a cached prefix", cache.hits),
        gauge("triode_prompt_cache_disk_capacity_bytes", "the prompt cache's disk budget "
              "(--prompt-cache-disk-bytes; 0 without --prompt-cache-dir)", cache.disk_max_bytes),
        gauge("triode_prompt_cache_disk_bytes", "bytes of prompt cache files on disk",
              cache.disk_bytes),
        gauge("triode_prompt_cache_disk_entries", "prompt cache entries on disk",
              cache.disk_entries),
        counter("triode_prompt_cache_disk_hits_total",
                "sequences prefilled from an entry loaded back from disk", cache.disk_hits),
        counter("triode_prompt_cache_disk_writes_total", "prompt cache entries written to disk",
                cache.disk_writes),
        counter("triode_prompt_cache_disk_write_errors_total", "prompt cache writes that failed "
                "(disk full, unwritable) or were dropped (the writer fell behind)",
                cache.disk_write_errors),
        counter("triode_prompt_cache_disk_skipped_total", "prompt cache files skipped as "
                "truncated, corrupt or another configuration's", cache.disk_skipped),
    ]
    if info is not None and info.blas_threads is not None:
        families.append(gauge("triode_blas_threads", "MKL's thread cap", info.blas_threads))
    if model.speculation is not None:
        families += speculation_metrics(model.speculation)
    if model.distributed is not None:
        families += distributed_metrics(model.distributed)
    return families


def distributed_metrics(d: DistributedStatistics) -> list[Metric]:
    """--distributed: the group's state and each rank's engine figures, as last gathered
    (every GATHER_EVERY steps: model/lockstep.py)."""
    def per_rank(family: CounterMetricFamily, value: Callable[[RankFigures], float]
                 ) -> Metric:
        return labelled(family, (([str(r.rank)], value(r)) for r in d.ranks))

    return [
        gauge("triode_distributed_ranks", "ranks in the group (--distributed)", len(d.ranks)),
        gauge("triode_distributed_up", "1 while the group serves; 0 once a rank died, "
              "stalled or disconnected", int(d.failure is None)),
        per_rank(CounterMetricFamily("triode_distributed_steps_total",
                                     "forward passes each rank ran", labels=["rank"]),
                 lambda r: r.steps),
        per_rank(CounterMetricFamily("triode_distributed_step_seconds_total",
                                     "each rank's time in forward passes (compute and the "
                                     "model's own collectives)", labels=["rank"]),
                 lambda r: r.step_seconds),
        per_rank(CounterMetricFamily("triode_distributed_record_seconds_total",
                                     "each rank's time in the step records' collectives (a "
                                     "follower's includes waiting for rank 0)",
                                     labels=["rank"]),
                 lambda r: r.record_seconds),
    ]


def speculation_metrics(st: SpeculationStatistics) -> list[Metric]:
    guard = GaugeMetricFamily("triode_speculative_guard_state",
                              "the payoff guard per batch width: 1 for its state",
                              labels=["width", "state"])
    ratio = GaugeMetricFamily("triode_speculative_guard_ratio",
                              "the guard's last window: speculative tokens per second "
                              "against plain decoding's", labels=["width"])
    for g in st.guard:
        guard.add_metric([str(g.width), g.state], 1)
        if g.ratio is not None:
            ratio.add_metric([str(g.width)], g.ratio)
    return [
        labelled(CounterMetricFamily("triode_decode_steps_total", "decode steps by kind",
                                     labels=["kind"]),
                 ((["plain"], st.plain_steps), (["speculative"], st.speculative_steps))),
        counter("triode_speculative_drafted_tokens_total", "draft tokens verified",
                st.drafted),
        counter("triode_speculative_accepted_tokens_total", "draft tokens accepted",
                st.accepted),
        gauge("triode_speculative_acceptance_ratio", "accepted / drafted tokens",
              st.acceptance_rate),
        gauge("triode_speculative_tokens_per_step",
              "tokens a sequence got per decode step (1 without drafts)", st.tokens_per_step),
        counter("triode_speculative_compactions_total",
                "gathers that removed the KV cache's holes", st.compactions),
        guard, ratio]


def registry_metrics(registry: RegistryStatistics) -> list[Metric]:
    return [
        gauge("triode_responses_live", "responses with a live supervisor", registry.live),
        counter("triode_responses_started_total", "responses started (supervisors)",
                registry.started),
        gauge("triode_background_jobs", "active background responses",
              registry.background_jobs),
        gauge("triode_background_jobs_capacity",
              "active background responses allowed (--responses-background-max-jobs)",
              registry.background_max_jobs),
    ]


def store_metrics(reached: dict[str, BudgetStatistics | None]) -> list[Metric]:
    stores = {name: st for name, st in reached.items() if st is not None}

    def per_store(family: GaugeMetricFamily | CounterMetricFamily, field: str) -> Metric:
        return labelled(family, (([name], getattr(st, field)) for name, st in stores.items()))

    store = ["store"]
    return [
        labelled(GaugeMetricFamily("triode_store_up", "1 while the store answers (0: its "
                                   "Redis cannot be reached, or its SQLite file fails)", labels=store),
                 (([name], int(st is not None)) for name, st in reached.items())),
        per_store(GaugeMetricFamily("triode_store_entries", "entries kept", labels=store),
                  "entries"),
        per_store(GaugeMetricFamily("triode_store_bytes", "retained JSON bytes",
                                    labels=store), "bytes"),
        per_store(GaugeMetricFamily("triode_store_pinned_entries",
                                    "entries of running background jobs (outside TTL and LRU)",
                                    labels=store), "pinned_entries"),
        per_store(GaugeMetricFamily("triode_store_pinned_bytes",
                                    "bytes reserved by running background jobs", labels=store),
                  "pinned_bytes"),
        per_store(GaugeMetricFamily("triode_store_capacity_entries", "entry budget",
                                    labels=store), "max_entries"),
        per_store(GaugeMetricFamily("triode_store_capacity_bytes", "byte budget",
                                    labels=store), "max_bytes"),
        labelled(CounterMetricFamily("triode_store_evictions_total",
                                     "entries the store dropped, by reason",
                                     labels=["store", "reason"]),
                 (([name, reason], getattr(st.evictions, reason))
                  for name, st in stores.items() for reason in EVICTION_REASONS)),
        labelled(CounterMetricFamily("triode_store_deletions_total",
                                     "entries deleted on request", labels=store),
                 (([name], st.evictions.deleted) for name, st in stores.items())),
    ]


def http_metrics(access: AccessLog) -> list[Metric]:
    st = access.statistics()
    durations = HistogramMetricFamily(
        "triode_http_request_duration_seconds",
        "from a request's arrival to its response's last byte (a stream's end), WebSockets "
        "aside", labels=["method", "route"])
    for (method, route_), hist in sorted(st.durations.items()):
        durations.add_metric([method, route_], histogram_buckets(hist), hist.sum)
    return [
        labelled(CounterMetricFamily("triode_http_requests_total",
                                     "requests answered (a WebSocket: 101 when accepted), by "
                                     "route template and status",
                                     labels=["method", "route", "status"]),
                 (([method, route_, status], n)
                  for (method, route_, status), n in sorted(st.requests.items()))),
        durations,
        gauge("triode_http_requests_in_flight", "requests (and WebSockets) being answered",
              st.in_flight),
        labelled(CounterMetricFamily("triode_tenant_requests_total",
                                     "requests a tenant of --api-keys-file made, by status "
                                     "(its name, never its key)",
                                     labels=["tenant", "status"]),
                 (([tenant, status], n)
                  for (tenant, status), n in sorted(st.tenant_requests.items()))),
        labelled(CounterMetricFamily("triode_tenant_tokens_total",
                                     "tokens the responses a tenant was answered with used, "
                                     "by kind (input, cached, output)",
                                     labels=["tenant", "kind"]),
                 (([tenant, kind], n)
                  for (tenant, kind), n in sorted(st.tenant_tokens.items()))),
    ]

