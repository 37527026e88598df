"""The guarantees `/v1/responses` has, on the other APIs' routes (Chat Completions,
Completions, Anthropic Messages) through a real server: a client that disconnects cancels
its generation and frees its slot; a tenant's limits and isolation apply; `/metrics` counts
each route; the live page lists their responses."""

from __future__ import annotations

import json
from typing import Iterator

import httpx
import pytest

from ..conftest import Server, run_server, wait_until

MODEL = "triode-tiny"
# Held open for seconds: a long string the schema forces (as test_spine's HOLD).
SCHEMA = {"type": "object", "properties": {"a": {"type": "string", "minLength": 2000}},
          "required": ["a"], "additionalProperties": False}
HOLDS = {
    "/v1/chat/completions": {"model": MODEL, "stream": True, "max_tokens": 4000,
                             "messages": [{"role": "user", "content": "Reply with: a"}],
                             "response_format": {"type": "json_schema", "json_schema": {
                                 "name": "hold", "strict": True, "schema": SCHEMA}}},
    "/v1/messages": {"model": MODEL, "stream": True, "max_tokens": 4000,
                     "messages": [{"role": "user", "content": "Reply with: a"}],
                     "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
    "/v1/completions": {"model": MODEL, "stream": True, "max_tokens": 4000,
                        "prompt": "Once upon a time", "temperature": 1.0,
                        "seed": 1},   # this seed writes past 300 tokens: no early end
}
ALICE, BOB = "sk-other-alice", "sk-other-bob"


@pytest.mark.parametrize("route", sorted(HOLDS))
def test_a_disconnect_cancels_the_generation(server, route):
    before = server.health()["generation"]["tokens"]
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        with http.stream("POST", route, json=HOLDS[route]) as r:
            lines = r.iter_lines()   # kept referenced: a dropped iterator closes the stream
            seen = 0
            for line in lines:
                if line.startswith("data: "):
                    seen += 1
                if seen >= 4:
                    break
            assert server.health()["slots"]["busy"] == 1
    wait_until(lambda: server.health()["slots"]["busy"] == 0)
    assert server.health()["generation"]["tokens"] - before < 1000
    wait_until(lambda: server.health()["responses"]["live"] == 0)
    recent = server.http.get("/ui/events").json()["recent"]
    assert recent[0]["status"] == "cancelled"


@pytest.fixture(scope="module")
def tenanted(tmp_path_factory) -> Iterator[Server]:
    keys = tmp_path_factory.mktemp("keys") / "keys.json"
    keys.write_text(json.dumps({"tenants": {
        "alice": {"keys": [ALICE], "requests_per_minute": 3},
        "bob": {"keys": [BOB]}}}))
    with run_server("--api-keys-file", str(keys)) as server:
        yield server


def test_a_tenants_limit_counts_every_api(tenanted):
    """alice's 3 requests a minute are spent on three APIs; the fourth, on a fourth route,
    is a 429 (in Anthropic's shape on /v1/messages); bob is not limited."""
    http = httpx.Client(base_url=tenanted.base_url, timeout=60)
    alice = {"Authorization": f"Bearer {ALICE}"}
    short = {"/v1/chat/completions": {"model": MODEL, "max_tokens": 2,
                                      "messages": [{"role": "user", "content": "hi"}]},
             "/v1/completions": {"model": MODEL, "max_tokens": 2, "prompt": "hi"},
             "/v1/responses": {"model": MODEL, "max_output_tokens": 2, "input": "hi"},
             "/v1/messages": {"model": MODEL, "max_tokens": 2,
                              "messages": [{"role": "user", "content": "hi"}]}}
    routes = list(short)
    for route in routes[:3]:
        assert http.post(route, json=short[route], headers=alice).status_code == 200
    refused = http.post("/v1/messages", json=short["/v1/messages"],
                        headers={"x-api-key": ALICE})
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert http.post("/v1/chat/completions", json=short["/v1/chat/completions"],
                     headers=alice).status_code == 429
    bob = {"Authorization": f"Bearer {BOB}"}
    assert all(http.post(route, json=short[route], headers=bob).status_code == 200
               for route in routes)


def test_metrics_count_each_route_and_the_live_page_lists_the_responses(server):
    r = server.http.post("/v1/chat/completions", json={
        "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    response_id = "resp_" + r.json()["id"].removeprefix("chatcmpl-")
    m = server.http.post("/v1/messages", json={
        "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    assert m.status_code == 200
    text = server.http.get("/metrics").text
    for route in ("/v1/chat/completions", "/v1/messages"):
        assert any(line.startswith("triode_http_requests_total{") and f'route="{route}"' in line
                   and 'status="200"' in line for line in text.splitlines()), route
    recent = [e["id"] for e in server.http.get("/ui/events").json()["recent"]]
    assert response_id in recent
