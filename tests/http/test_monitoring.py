"""/health and /metrics in process (Quart's test client, the real actors, the fake model):
/health is a readiness probe (503 when degraded, same body) and needs no key; /metrics
renders the same figures in Prometheus' text format."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from triode.http.app import create_app
from triode.http.monitoring import CONTENT_TYPE

from .inprocess import MODEL, handles_for


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape by (name, sorted labels)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_health_is_200_while_ready_and_503_with_the_same_body_when_not(nursery):
    """A readiness probe fails while the engine is down; the body still reports
    everything; /health needs no API key."""
    handles = await handles_for(nursery, api_key="sk-key")
    client = create_app(handles, access_log=False).test_client()
    ok = await client.get("/health")
    body = await ok.get_json()
    assert (ok.status_code, body["status"], body["model"]) == (200, "ok", MODEL)
    handles.models._handle.alive = False   # type: ignore[attr-defined]
    down = await client.get("/v1/health")
    degraded = await down.get_json()
    assert (down.status_code, degraded["status"]) == (503, "degraded")
    assert set(degraded) == set(body)


async def test_metrics_are_prometheus_text_with_the_actors_figures(nursery):
    """The scrape parses as Prometheus' text format; the model, its engine, and every
    store's budget are there with their labels."""
    handles = await handles_for(nursery)
    client = create_app(handles, access_log=False).test_client()
    scrape = await client.get("/metrics")
    assert scrape.headers["Content-Type"] == CONTENT_TYPE
    found = samples((await scrape.get_data()).decode())
    assert found[("triode_context_window_tokens", ())] == 4096
    assert found[("triode_slots_capacity", ())] == 4
    assert found[("triode_engine_alive", ())] == 1
    for store in ("responses", "conversations", "reasoning_echo"):
        assert found[("triode_store_up", (("store", store),))] == 1
        assert found[("triode_store_capacity_entries", (("store", store),))] > 0
    [info] = [labels for name, labels in found if name == "triode_model_info"]
    assert dict(info)["model"] == MODEL


async def test_a_created_response_shows_in_the_store_figures(nursery):
    """The figures are read at the scrape: a stored response counts as an entry."""
    handles = await handles_for(nursery)
    client = create_app(handles, access_log=False).test_client()
    key = ("triode_store_entries", (("store", "responses"),))
    before = samples((await (await client.get("/metrics")).get_data()).decode())[key]
    await client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
    after = samples((await (await client.get("/metrics")).get_data()).decode())[key]
    assert after == before + 1
