"""/metrics end to end: Prometheus' text format as prometheus_client parses it, the families
an operator alerts on, and counters that move with the requests that should move them."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ..conftest import run_server, wait_until
from .test_spine import HOLD, MODEL

# Family → type, as the parser names them (a counter's family drops its `_total`).
FAMILIES = {
    "triode_model_info": "gauge",
    "triode_context_window_tokens": "gauge",
    "triode_slots_capacity": "gauge",
    "triode_slots_busy": "gauge",
    "triode_queue_depth": "gauge",
    "triode_queue_capacity": "gauge",
    "triode_engine_alive": "gauge",
    "triode_engine_restarts": "counter",
    "triode_requests_admitted": "counter",
    "triode_requests_rejected": "counter",
    "triode_prompt_tokens": "counter",
    "triode_cached_prompt_tokens": "counter",
    "triode_generated_tokens": "counter",
    "triode_sequences_finished": "counter",
    "triode_queue_wait_seconds": "histogram",
    "triode_time_to_first_token_seconds": "histogram",
    "triode_time_per_output_token_seconds": "histogram",
    "triode_generation_duration_seconds": "histogram",
    "triode_prompt_cache_capacity_bytes": "gauge",
    "triode_prompt_cache_bytes": "gauge",
    "triode_prompt_cache_entries": "gauge",
    "triode_prompt_cache_hits": "counter",
    "triode_prompt_cache_disk_capacity_bytes": "gauge",
    "triode_prompt_cache_disk_bytes": "gauge",
    "triode_prompt_cache_disk_entries": "gauge",
    "triode_prompt_cache_disk_hits": "counter",
    "triode_prompt_cache_disk_writes": "counter",
    "triode_prompt_cache_disk_write_errors": "counter",
    "triode_prompt_cache_disk_skipped": "counter",
    "triode_responses_live": "gauge",
    "triode_background_jobs": "gauge",
    "triode_store_up": "gauge",
    "triode_store_entries": "gauge",
    "triode_store_bytes": "gauge",
    "triode_store_evictions": "counter",
    "triode_http_requests": "counter",
    "triode_http_request_duration_seconds": "histogram",
    "triode_http_requests_in_flight": "gauge",
}


def scrape(server) -> dict:
    """{family name: family} from one GET /metrics."""
    r = server.http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def value(families: dict, sample: str, **labels: str) -> float:
    """One sample's value (0 when the labelled series does not exist yet)."""
    family = sample
    for suffix in ("_total", "_count", "_sum", "_bucket"):
        family = family.removesuffix(suffix)
    for s in families[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return 0.0


def test_metrics_follow_prometheus_conventions(server):
    """Every family an operator alerts on is there with its type; a counter's samples end in
    `_total` and nothing else does; a histogram has `le` buckets ending at +Inf; no gauge is
    called `_total` (the seed's triode_slots_total); store evictions are one metric with a
    `reason` label; the context window and capacity gauges match /health."""
    families = scrape(server)
    for name, kind in FAMILIES.items():
        assert name in families, name
        assert families[name].type == kind, (name, families[name].type)
    for family in families.values():
        for s in family.samples:
            assert s.name.endswith("_total") == (family.type == "counter"), s.name
    assert not [n for n in families if "evictions_" in n]
    reasons = {s.labels["reason"] for s in families["triode_store_evictions"].samples}
    assert reasons == {"ttl", "lru", "bytes", "oversize"}
    stores = {s.labels["store"] for s in families["triode_store_entries"].samples}
    assert stores == {"responses", "conversations", "reasoning_echo"}
    buckets = [s for s in families["triode_time_to_first_token_seconds"].samples
               if s.name.endswith("_bucket")]
    assert buckets[-1].labels["le"] == "+Inf"
    health = server.health()
    assert value(families, "triode_context_window_tokens") == health["context_window"] == 4096
    assert value(families, "triode_slots_capacity") == health["slots"]["total"]
    assert value(families, "triode_queue_capacity") == health["queue"]["max"]
    info, = families["triode_model_info"].samples
    assert info.labels["model"] == MODEL == health["model"]


def test_requests_move_the_counters_and_histograms(server, client):
    """A create and a streamed create count two 200s for route /v1/responses; their prompt,
    cached and generated tokens, TTFT, time per output token, generation and HTTP duration
    histograms all grow by what the two responses report."""
    before = scrape(server)
    prompt = "Reply with: amber 77 falcon"
    first = client.responses.create(model=MODEL, input=prompt)
    with client.responses.stream(model=MODEL, input=prompt) as stream:
        second = stream.get_final_response()
    after = scrape(server)

    def grew(sample: str, **labels: str) -> float:
        return value(after, sample, **labels) - value(before, sample, **labels)

    create = {"method": "POST", "route": "/v1/responses"}
    assert grew("triode_http_requests_total", **create, status="200") == 2
    assert grew("triode_http_request_duration_seconds_count", **create) == 2
    assert grew("triode_http_request_duration_seconds_sum", **create) > 0
    usages = [first.usage, second.usage]
    assert grew("triode_prompt_tokens_total") == sum(u.input_tokens for u in usages)
    assert grew("triode_generated_tokens_total") == sum(u.output_tokens for u in usages)
    # The second is the first's prompt again: all of it but its last token is reused.
    cached = [u.input_tokens_details.cached_tokens for u in usages]
    assert cached[1] == second.usage.input_tokens - 1
    assert grew("triode_cached_prompt_tokens_total") == sum(cached)
    assert grew("triode_prompt_cache_hits_total") == sum(1 for n in cached if n)
    for histogram in ("triode_time_to_first_token_seconds", "triode_queue_wait_seconds",
                      "triode_time_per_output_token_seconds",
                      "triode_generation_duration_seconds"):
        assert grew(f"{histogram}_count") == 2, histogram
        assert grew(f"{histogram}_bucket", le="+Inf") == 2, histogram
    assert grew("triode_sequences_finished_total", outcome="stop") == 2
    assert grew("triode_requests_admitted_total") == 2


def test_requests_are_counted_by_route_template_and_status(server, client):
    """A GET of a stored response counts under its route template, never its raw path (no
    unbounded label values); a 400, a 404 of a known route and an unknown path are counted
    with their status, the last as route `unmatched`."""
    before = scrape(server)
    stored = client.responses.create(model=MODEL, input="Reply with: ok", max_output_tokens=16)
    assert server.http.get(f"/v1/responses/{stored.id}").status_code == 200
    assert server.http.get("/v1/responses/resp_nothere").status_code == 404
    assert server.http.post("/v1/responses", content=b"{").status_code == 400
    assert server.http.get("/no/such/path").status_code == 404
    after = scrape(server)

    def grew(**labels: str) -> float:
        return (value(after, "triode_http_requests_total", **labels)
                - value(before, "triode_http_requests_total", **labels))

    one = "/v1/responses/<response_id>"
    assert grew(method="GET", route=one, status="200") == 1
    assert grew(method="GET", route=one, status="404") == 1
    assert grew(method="POST", route="/v1/responses", status="400") == 1
    assert grew(method="GET", route="unmatched", status="404") == 1
    labels = {v for s in after["triode_http_requests"].samples for v in s.labels.values()}
    assert not [v for v in labels if "resp_" in v or "no/such" in v]


def test_store_evictions_are_one_metric_with_a_reason():
    """Past `--responses-store-max-entries`, the LRU eviction shows as
    triode_store_evictions_total{store="responses",reason="lru"}, the store's size as
    triode_store_entries."""
    with run_server("--responses-store-max-entries", "1") as srv:
        client = srv.client()
        for word in ("one", "two", "three"):
            client.responses.create(model=MODEL, input=f"Reply with: {word}",
                                    max_output_tokens=16)
        families = scrape(srv)
        assert value(families, "triode_store_evictions_total", store="responses",
                     reason="lru") == 2
        assert value(families, "triode_store_evictions_total", store="responses",
                     reason="ttl") == 0
        assert value(families, "triode_store_entries", store="responses") == 1
        assert value(families, "triode_store_capacity_entries", store="responses") == 1


def test_rejected_and_abandoned_generations_are_counted():
    """A create refused with a full queue counts in triode_requests_rejected_total and as a
    503 on its route; a stream the client abandons ends as outcome `released`."""
    with run_server("--parallel", "1", "--max-queue", "0") as srv:
        before = scrape(srv)
        with httpx.Client(base_url=srv.base_url, timeout=60) as http:
            with http.stream("POST", "/v1/responses", json=HOLD) as held:
                lines = held.iter_lines()   # kept referenced: a dropped one closes the stream
                for line in lines:
                    if line.startswith("event: response.output_text.delta"):
                        break
                refused = srv.http.post("/v1/responses", json={"model": MODEL, "input": "hi"})
                assert refused.status_code == 503

        def released() -> dict | None:   # once the stream's release reached the model actor
            families = scrape(srv)
            return families if value(families, "triode_sequences_finished_total",
                                     outcome="released") else None

        after = wait_until(released)
        assert value(after, "triode_requests_rejected_total") == 1
        assert value(after, "triode_http_requests_total", method="POST",
                     route="/v1/responses", status="503") == 1
        assert value(after, "triode_sequences_finished_total", outcome="released") == 1
        assert value(before, "triode_sequences_finished_total", outcome="released") == 0
