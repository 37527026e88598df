"""The Conversations routes in process (Quart's test client, the real conversation store):
each route mounted with and without `/v1`, answering the service's objects and its 404s and
400s as OpenAI's error object."""

from __future__ import annotations

from triode.http.app import create_app

from .inprocess import MODEL, handles_for


async def app_for(nursery):
    return create_app(await handles_for(nursery), access_log=False).test_client()


async def test_a_conversation_is_created_read_updated_and_deleted(nursery):
    """Create answers the object; GET (with or without /v1) reads it; POST replaces its
    metadata; DELETE answers the deleted object, after which it is a 404 naming it."""
    client = await app_for(nursery)
    made = await (await client.post("/v1/conversations", json={"metadata": {"a": "1"}})
                  ).get_json()
    path = f"/conversations/{made['id']}"
    assert await (await client.get("/v1" + path)).get_json() == made
    assert await (await client.get(path)).get_json() == made
    updated = await (await client.post(path, json={"metadata": {"b": "2"}})).get_json()
    assert updated == {**made, "metadata": {"b": "2"}}
    assert await (await client.delete(path)).get_json() == {
        "id": made["id"], "object": "conversation.deleted", "deleted": True}
    gone = await client.get(path)
    assert gone.status_code == 404
    assert (await gone.get_json())["error"]["param"] == "conversation_id"


async def test_items_are_added_listed_read_and_deleted(nursery):
    """Items added answer as a list; the item routes read and delete one by id; the query's
    paging is the list's."""
    client = await app_for(nursery)
    made = await (await client.post("/v1/conversations", json={
        "items": [{"role": "user", "content": "one"}]})).get_json()
    items = f"/v1/conversations/{made['id']}/items"
    added = await (await client.post(items, json={
        "items": [{"role": "assistant", "content": "two"}]})).get_json()
    [item] = added["data"]
    listed = await (await client.get(items + "?order=asc")).get_json()
    assert [i["content"][0]["text"] for i in listed["data"]] == ["one", "two"]
    newest = await (await client.get(items + "?limit=1")).get_json()
    assert ([i["id"] for i in newest["data"]], newest["has_more"]) == ([item["id"]], True)
    assert await (await client.get(f"{items}/{item['id']}")).get_json() == item
    assert (await client.delete(f"{items}/{item['id']}")).status_code == 200
    missing = await client.get(f"{items}/{item['id']}")
    assert (missing.status_code, (await missing.get_json())["error"]["param"]) == (
        404, "item_id")


async def test_bad_queries_and_bodies_are_400s_naming_the_field(nursery):
    """A bad `order`, an unknown `include` and too many items are refused by name."""
    client = await app_for(nursery)
    made = await (await client.post("/v1/conversations", json={})).get_json()
    items = f"/v1/conversations/{made['id']}/items"
    for answer, param in (
            (await client.get(items + "?order=sideways"), "order"),
            (await client.get(items + "?include=everything"), "include"),
            (await client.post(items, json={"items": [{"role": "user", "content": "x"}] * 21}),
             "items")):
        assert answer.status_code == 400
        assert (await answer.get_json())["error"]["param"] == param


async def test_a_response_s_conversation_is_readable_here(nursery):
    """A response created with `conversation` extends the same record these routes read."""
    client = await app_for(nursery)
    made = await (await client.post("/v1/conversations", json={})).get_json()
    await client.post("/v1/responses", json={"model": MODEL, "input": "hi",
                                             "conversation": made["id"]})
    listed = await (await client.get(f"/v1/conversations/{made['id']}/items?order=asc")
                    ).get_json()
    assert [i["role"] for i in listed["data"]] == ["user", "assistant"]
