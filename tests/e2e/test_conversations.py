"""The Conversations API end to end with the openai SDK: every method, paging, errors, the
store's budgets, and conversations shared with `POST /v1/responses`."""

from __future__ import annotations

import time
import uuid

import openai
import pytest

from ..conftest import run_server
from .test_spine import MODEL, error_of

RECALL = "Repeat your first answer."


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": text}


def texts(items) -> list[str]:
    return [part.text for item in items for part in item.content]


def test_create_with_items_and_metadata_then_retrieve(client):
    """create returns a conv_ object with its metadata; retrieve and items.list read it back."""
    before = int(time.time())
    conv = client.conversations.create(items=[user("one"), user("two")], metadata={"k": "v"})
    assert conv.id.startswith("conv_") and conv.object == "conversation"
    assert before <= conv.created_at <= int(time.time()) and conv.metadata == {"k": "v"}
    assert client.conversations.retrieve(conv.id).model_dump() == conv.model_dump()
    items = client.conversations.items.list(conv.id, order="asc").data
    assert texts(items) == ["one", "two"]
    assert all(item.id.startswith("msg_") and item.type == "message" and item.role == "user"
               and item.status == "completed" for item in items)


def test_create_without_a_body_makes_an_empty_conversation(client):
    """An empty body (no items, no metadata) creates an empty conversation."""
    conv = client.conversations.create()
    assert conv.metadata == {}
    page = client.conversations.items.list(conv.id)
    assert (page.data, page.has_more, page.first_id, page.last_id) == ([], False, None, None)


def test_update_replaces_the_metadata(client):
    """update replaces the metadata, keeps id, created_at and items."""
    conv = client.conversations.create(items=[user("kept")], metadata={"a": "1", "b": "2"})
    updated = client.conversations.update(conv.id, metadata={"c": "3"})
    assert (updated.id, updated.created_at, updated.metadata) == (conv.id, conv.created_at,
                                                                  {"c": "3"})
    assert client.conversations.retrieve(conv.id).metadata == {"c": "3"}
    assert texts(client.conversations.items.list(conv.id).data) == ["kept"]


def test_delete_then_404(client):
    """delete answers conversation.deleted; afterwards every route on it is 404 not_found."""
    conv = client.conversations.create(items=[user("gone")])
    deleted = client.conversations.delete(conv.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (conv.id, "conversation.deleted",
                                                             True)
    for call in (lambda: client.conversations.retrieve(conv.id),
                 lambda: client.conversations.delete(conv.id),
                 lambda: client.conversations.items.list(conv.id)):
        with pytest.raises(openai.NotFoundError) as exc:
            call()
        assert exc.value.code == "not_found"


def test_items_create_appends_and_returns_the_new_items(client):
    """items.create appends up to 20 items and returns exactly those, ids included."""
    conv = client.conversations.create(items=[user("first")])
    added = client.conversations.items.create(conv.id, items=[
        user("second"), {"type": "message", "role": "assistant", "content": "third"}])
    assert added.object == "list" and added.has_more is False
    assert texts(added.data) == ["second", "third"]
    assert (added.first_id, added.last_id) == (added.data[0].id, added.data[-1].id)
    listed = client.conversations.items.list(conv.id, order="asc").data
    assert texts(listed) == ["first", "second", "third"]
    assert [i.id for i in listed[1:]] == [i.id for i in added.data]
    twenty = client.conversations.items.create(conv.id, items=[user(str(n)) for n in range(20)])
    assert len(twenty.data) == 20


def test_items_list_pages_with_after_limit_and_order(client):
    """Default order is desc; limit and after page through; the SDK's auto-paging sees all."""
    words = [f"w{n}" for n in range(7)]
    conv = client.conversations.create(items=[user(w) for w in words])
    first = client.conversations.items.list(conv.id, limit=3)
    assert texts(first.data) == ["w6", "w5", "w4"] and first.has_more is True
    assert (first.first_id, first.last_id) == (first.data[0].id, first.data[-1].id)
    second = client.conversations.items.list(conv.id, limit=3, after=first.last_id)
    assert texts(second.data) == ["w3", "w2", "w1"] and second.has_more is True
    last = client.conversations.items.list(conv.id, limit=3, after=second.last_id)
    assert texts(last.data) == ["w0"] and last.has_more is False
    assert texts(client.conversations.items.list(conv.id, limit=2, order="asc")) == words
    assert texts(client.conversations.items.list(conv.id, limit=7, order="asc").data) == words
    assert client.conversations.items.list(conv.id, limit=7).has_more is False


def test_items_list_limit_edges(client):
    """limit 1 and 100 are accepted; with no limit a page has 20 items."""
    conv = client.conversations.create(items=[user(str(n)) for n in range(20)])
    client.conversations.items.create(conv.id, items=[user("20")])
    one = client.conversations.items.list(conv.id, limit=1)
    assert texts(one.data) == ["20"] and one.has_more is True
    hundred = client.conversations.items.list(conv.id, limit=100)
    assert len(hundred.data) == 21 and hundred.has_more is False
    default = client.conversations.items.list(conv.id)
    assert len(default.data) == 20 and default.has_more is True


@pytest.mark.parametrize("query,param", [
    ("limit=0", "limit"), ("limit=101", "limit"), ("limit=ten", "limit"),
    ("order=sideways", "order"), ("after=msg_nope", "after"), ("include=nope", "include")])
def test_items_list_bad_query_is_400(client, server, query, param):
    """Out-of-range limit, unknown order, cursor or include are 400s naming the parameter."""
    conv = client.conversations.create(items=[user("q")])
    r = server.http.get(f"/v1/conversations/{conv.id}/items?{query}")
    assert r.status_code == 400 and error_of(r)["param"] == param


def test_include_is_accepted(client, server):
    """Known include values are accepted on list, create and retrieve of items."""
    conv = client.conversations.create(items=[user("q")])
    include = ["message.output_text.logprobs", "reasoning.encrypted_content"]
    added = client.conversations.items.create(conv.id, items=[user("r")], include=include)
    assert len(client.conversations.items.list(conv.id, include=include).data) == 2
    got = client.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id,
                                              include=include)
    assert got.id == added.data[0].id
    r = server.http.get(f"/v1/conversations/{conv.id}/items",
                        params=[("include", i) for i in include])
    assert r.status_code == 200


def test_item_retrieve_and_delete(client):
    """items.retrieve returns one item; items.delete removes it and returns the conversation."""
    conv = client.conversations.create(items=[user("keep"), user("drop")], metadata={"m": "1"})
    drop = client.conversations.items.list(conv.id).data[0]
    got = client.conversations.items.retrieve(drop.id, conversation_id=conv.id)
    assert got.model_dump() == drop.model_dump() and texts([got]) == ["drop"]
    after = client.conversations.items.delete(drop.id, conversation_id=conv.id)
    assert after.model_dump() == conv.model_dump()
    assert texts(client.conversations.items.list(conv.id).data) == ["keep"]
    with pytest.raises(openai.NotFoundError) as exc:
        client.conversations.items.retrieve(drop.id, conversation_id=conv.id)
    assert exc.value.code == "not_found" and exc.value.param == "item_id"


def test_unknown_conversation_is_404_on_every_route(server):
    """Each route on an unknown conversation is 404 not_found naming conversation_id."""
    cid = f"conv_{uuid.uuid4().hex}"
    for method, path, body in (
            ("GET", f"/v1/conversations/{cid}", None),
            ("POST", f"/v1/conversations/{cid}", {"metadata": {}}),
            ("DELETE", f"/v1/conversations/{cid}", None),
            ("GET", f"/v1/conversations/{cid}/items", None),
            ("POST", f"/v1/conversations/{cid}/items", {"items": [user("x")]}),
            ("GET", f"/v1/conversations/{cid}/items/msg_1", None),
            ("DELETE", f"/v1/conversations/{cid}/items/msg_1", None)):
        r = server.http.request(method, path, json=body)
        assert r.status_code == 404, (method, path, r.text)
        assert error_of(r)["code"] == "not_found"
        assert error_of(r)["param"] == "conversation_id" and cid in error_of(r)["message"]


def test_unknown_item_is_404(client):
    """An unknown item id is 404 not_found naming item_id, on retrieve and delete."""
    conv = client.conversations.create(items=[user("x")])
    for call in (lambda: client.conversations.items.retrieve("msg_nope", conversation_id=conv.id),
                 lambda: client.conversations.items.delete("msg_nope", conversation_id=conv.id)):
        with pytest.raises(openai.NotFoundError) as exc:
            call()
        assert exc.value.code == "not_found" and exc.value.param == "item_id"


def test_routes_are_mounted_without_v1(client, server):
    """Every route also answers without the /v1 prefix."""
    created = server.http.post("/conversations", json={"items": [user("bare")]}).json()
    cid = created["id"]
    assert server.http.get(f"/conversations/{cid}").json() == created
    assert server.http.post(f"/conversations/{cid}", json={"metadata": {"a": "b"}}
                            ).json()["metadata"] == {"a": "b"}
    added = server.http.post(f"/conversations/{cid}/items", json={"items": [user("more")]})
    item_id = added.json()["data"][0]["id"]
    assert server.http.get(f"/conversations/{cid}/items").json()["data"][0]["id"] == item_id
    assert server.http.get(f"/conversations/{cid}/items/{item_id}").json()["id"] == item_id
    assert server.http.delete(f"/conversations/{cid}/items/{item_id}").json()["id"] == cid
    assert server.http.delete(f"/conversations/{cid}").json()["deleted"] is True


def test_api_conversation_carries_responses_across_turns(client):
    """A conversation made by the API is a response's `conversation`: turn 2 sees turn 1."""
    conv = client.conversations.create()
    first = client.responses.create(model=MODEL, input="Reply with: amber 31",
                                    conversation=conv.id)
    assert first.output_text == "amber 31" and first.conversation.id == conv.id
    second = client.responses.create(model=MODEL, input=RECALL, conversation=conv.id)
    assert second.output_text == "amber 31"
    items = client.conversations.items.list(conv.id, order="asc").data
    assert texts(items) == ["Reply with: amber 31", "amber 31", RECALL, "amber 31"]
    assert [items[1].id, items[3].id] == [first.output[-1].id, second.output[-1].id]


def test_items_added_through_the_api_are_history(client):
    """Items from create and items.create are the next response's history, in order."""
    conv = client.conversations.create(items=[user("Reply with: copper 12"),
                                              {"role": "assistant", "content": "copper 12"}])
    assert client.responses.create(model=MODEL, input=RECALL,
                                   conversation=conv.id).output_text == "copper 12"
    other = client.conversations.create()
    client.conversations.items.create(other.id, items=[
        user("Reply with: violet 5"), {"role": "assistant", "content": "violet 5"}])
    assert client.responses.create(model=MODEL, input=RECALL,
                                   conversation=other.id).output_text == "violet 5"


def test_implicit_conversation_is_readable_through_the_api(client):
    """A transcript made by `conversation: "<any id>"` reads as a conversation (created_at:
    its first write) with the turn's input and output items."""
    cid = f"my-id-{uuid.uuid4().hex}"
    before = int(time.time())
    response = client.responses.create(model=MODEL, input="Reply with: cedar 4",
                                       conversation=cid)
    conv = client.conversations.retrieve(cid)
    assert (conv.id, conv.object, conv.metadata) == (cid, "conversation", {})
    assert before <= conv.created_at <= int(time.time())
    items = client.conversations.items.list(cid, order="asc").data
    assert texts(items) == ["Reply with: cedar 4", "cedar 4"]
    assert items[1].id == response.output[-1].id
    client.conversations.update(cid, metadata={"named": "later"})
    again = client.responses.create(model=MODEL, input=RECALL, conversation=cid)
    assert again.output_text == "cedar 4"
    assert client.conversations.retrieve(cid).metadata == {"named": "later"}


@pytest.mark.parametrize("metadata,param", [
    ({f"k{n}": "v" for n in range(17)}, "metadata"),
    ({"k" * 65: "v"}, "metadata." + "k" * 65),
    ({"k": "v" * 513}, "metadata.k"),
    ({"k": 1}, "metadata"),
])
def test_metadata_over_the_limits_is_400(client, server, metadata, param):
    """Metadata past 16 pairs, 64-char keys or 512-char values is a 400 naming it, on create
    and on update."""
    r = server.http.post("/v1/conversations", json={"metadata": metadata})
    assert r.status_code == 400 and error_of(r)["param"] == param, r.text
    conv = client.conversations.create()
    r = server.http.post(f"/v1/conversations/{conv.id}", json={"metadata": metadata})
    assert r.status_code == 400 and error_of(r)["param"] == param, r.text
    assert client.conversations.retrieve(conv.id).metadata == {}


def test_metadata_at_the_limits_is_accepted(client):
    """16 pairs, a 64-char key and a 512-char value are accepted."""
    metadata = {f"k{n}": "v" for n in range(15)} | {"k" * 64: "v" * 512}
    conv = client.conversations.create(metadata=metadata)
    assert client.conversations.retrieve(conv.id).metadata == metadata


def test_bad_bodies_are_400_naming_the_field(client, server):
    """Over 20 items, an unknown item type, an item_reference or an unknown field: 400s."""
    conv = client.conversations.create()
    for path in ("/v1/conversations", f"/v1/conversations/{conv.id}/items"):
        for body, param in (({"items": [user("x")] * 21}, "items"),
                            ({"items": [{"type": "bogus"}]}, "items[0]"),
                            ({"items": [user("x"), {"type": "item_reference", "id": "msg_1"}]},
                             "items[1]"),
                            ({"items": [], "bogus": 1}, "bogus")):
            r = server.http.post(path, json=body)
            assert r.status_code == 400 and error_of(r)["param"] == param, (path, r.text)
    r = server.http.post(f"/v1/conversations/{conv.id}", json={})
    assert r.status_code == 400 and error_of(r)["param"] == "metadata"
    assert client.conversations.items.list(conv.id).data == []


def test_one_entry_budget_evicts_the_older_conversation():
    """--conversation-store-max-entries 1: a second conversation evicts the first (404)."""
    with run_server("--conversation-store-max-entries", "1") as srv:
        client = srv.client()
        first = client.conversations.create(items=[user("a")])
        second = client.conversations.create(items=[user("b")])
        with pytest.raises(openai.NotFoundError):
            client.conversations.retrieve(first.id)
        assert texts(client.conversations.items.list(second.id).data) == ["b"]
        implicit = client.responses.create(model=MODEL, input="Reply with: x",
                                           conversation="implicit")
        assert implicit.output_text == "x"
        with pytest.raises(openai.NotFoundError):
            client.conversations.retrieve(second.id)
        assert srv.health()["stores"]["conversations"]["evictions"]["lru"] == 2


def test_disabled_store_refuses_every_route():
    """--conversation-store-max-entries 0: every Conversations route is a 400 saying so."""
    with run_server("--conversation-store-max-entries", "0") as srv:
        for method, path, body in (
                ("POST", "/v1/conversations", {}),
                ("POST", "/conversations", {"items": [user("x")], "metadata": {"k": "v"}}),
                ("GET", "/v1/conversations/conv_1", None),
                ("POST", "/v1/conversations/conv_1", {"metadata": {}}),
                ("DELETE", "/v1/conversations/conv_1", None),
                ("GET", "/v1/conversations/conv_1/items", None),
                ("GET", "/v1/conversations/conv_1/items?limit=0", None),
                ("POST", "/v1/conversations/conv_1/items", {"items": [user("x")]}),
                ("GET", "/v1/conversations/conv_1/items/msg_1", None),
                ("DELETE", "/v1/conversations/conv_1/items/msg_1", None)):
            r = srv.http.request(method, path, json=body)
            assert r.status_code == 400, (method, path, r.text)
            assert "disabled" in error_of(r)["message"]
        with pytest.raises(openai.BadRequestError):
            srv.client().conversations.create()
