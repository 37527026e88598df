"""The Responses routes in process (Quart's test client, the real turn service over a fake
model that answers "hello there"): a create answered whole or streamed, a stored response
read back, replayed, listed and deleted, and the model routes."""

from __future__ import annotations

import json

from triode.http.app import create_app
from triode.http.models import CODEX_INSTRUCTIONS

from .inprocess import MODEL, handles_for


async def app_for(nursery):
    return create_app(await handles_for(nursery), access_log=False).test_client()


def sse_events(body: bytes) -> list[dict]:
    return [json.loads(line[len("data: "):]) for line in body.decode().splitlines()
            if line.startswith("data: ")]


def output_text(obj: dict) -> str:
    return "".join(part["text"] for item in obj["output"] if item["type"] == "message"
                   for part in item["content"])


async def test_a_create_answers_the_finished_object_or_its_stream(nursery):
    """Without `stream` the answer is the completed object; with it, server-sent events
    from `response.created` to `response.completed`, whose object is the same answer."""
    client = await app_for(nursery)
    whole = await (await client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
                   ).get_json()
    assert (whole["status"], output_text(whole)) == ("completed", "hello there")
    streamed = await client.post("/responses", json={"model": MODEL, "input": "hi",
                                                     "stream": True})
    assert streamed.headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(await streamed.get_data())
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert output_text(events[-1]["response"]) == "hello there"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


async def test_a_stored_response_is_read_replayed_and_deleted(nursery):
    """GET answers the stored object; `stream=true` replays its events, after
    `starting_after` when given; DELETE answers the deleted object, and the id is then a
    404."""
    client = await app_for(nursery)
    created = await (await client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
                     ).get_json()
    path = f"/v1/responses/{created['id']}"
    assert await (await client.get(path)).get_json() == created
    replay = sse_events(await (await client.get(path + "?stream=true")).get_data())
    assert replay[-1]["response"] == created
    later = sse_events(await (await client.get(path + "?stream=true&starting_after=2"))
                       .get_data())
    assert later == replay[3:]
    assert await (await client.delete(path)).get_json() == {
        "id": created["id"], "object": "response.deleted", "deleted": True}
    gone = await client.get(path)
    assert gone.status_code == 404


async def test_input_items_are_paged_like_a_conversation_s(nursery):
    """A stored response's input items, as a list object; a bad limit is a 400 naming it."""
    client = await app_for(nursery)
    created = await (await client.post("/v1/responses", json={
        "model": MODEL, "input": [{"role": "user", "content": "one"},
                                  {"role": "user", "content": "two"}]})).get_json()
    path = f"/v1/responses/{created['id']}/input_items"
    listed = await (await client.get(path + "?order=asc&limit=1")).get_json()
    assert [item["content"][0]["text"] for item in listed["data"]] == ["one"]
    assert listed["has_more"] is True
    bad = await client.get(path + "?limit=0")
    assert (bad.status_code, (await bad.get_json())["error"]["param"]) == (400, "limit")


async def test_input_tokens_counts_what_a_create_would_render(nursery):
    """The count is the rendered prompt's; `model` may be left out (the served one)."""
    client = await app_for(nursery)
    counted = await (await client.post("/v1/responses/input_tokens",
                                       json={"input": "hi"})).get_json()
    created = await (await client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
                     ).get_json()
    assert counted == {"object": "response.input_tokens",
                       "input_tokens": created["usage"]["input_tokens"]}


async def test_the_model_routes_name_the_served_model_only(nursery):
    """/models lists the served model (Codex's catalog shape with `client_version`); any
    other model id is a 404 model_not_found."""
    client = await app_for(nursery)
    listed = await (await client.get("/v1/models")).get_json()
    assert [m["id"] for m in listed["data"]] == [MODEL]
    assert listed["data"][0]["context_window"] == 4096
    catalog = await (await client.get("/v1/models?client_version=0.50.0")).get_json()
    assert [(m["slug"], m["base_instructions"]) for m in catalog["models"]] == [
        (MODEL, CODEX_INSTRUCTIONS)]
    assert (await client.get(f"/v1/models/{MODEL}")).status_code == 200
    other = await client.get("/v1/models/gpt-5")
    assert other.status_code == 404
    assert (await other.get_json())["error"]["code"] == "model_not_found"
