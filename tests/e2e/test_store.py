"""Stored responses, retrieval, chaining and conversations, end to end with the openai SDK."""

from __future__ import annotations

import uuid

import openai
import pytest

from ..conftest import run_server
from .test_spine import MODEL, error_of, sse_events

RECALL = "Repeat your first answer."


def test_three_turn_chain_sees_the_first_turn(client):
    """A→B→C: C's answer depends on A's, through two previous_response_id hops."""
    a = client.responses.create(model=MODEL, input="Reply with: amber falcon",
                                instructions="Be brief.")
    assert a.output_text == "amber falcon"
    b = client.responses.create(model=MODEL, input="Reply with: silver", previous_response_id=a.id)
    assert b.output_text == "silver" and b.previous_response_id == a.id
    c = client.responses.create(model=MODEL, input=RECALL, previous_response_id=b.id)
    assert c.output_text == "amber falcon"
    assert c.instructions is None


def test_chain_renders_history_without_inherited_instructions(client):
    """C's prompt is A's and B's inputs and outputs plus C's input, and no inherited system."""
    from transformers import AutoTokenizer

    from triode.model.loading import BUNDLED_PATH

    tok = AutoTokenizer.from_pretrained(str(BUNDLED_PATH))
    a = client.responses.create(model=MODEL, input="Reply with: copper", instructions="Be brief.")
    b = client.responses.create(model=MODEL, input="Reply with: violet", previous_response_id=a.id)
    msgs = [{"role": "user", "content": "Reply with: copper"},
            {"role": "assistant", "content": "copper"},
            {"role": "user", "content": "Reply with: violet"},
            {"role": "assistant", "content": "violet"},
            {"role": "user", "content": RECALL}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    c = client.responses.create(model=MODEL, input=RECALL, previous_response_id=b.id)
    assert c.usage.input_tokens == len(tok.encode(text, add_special_tokens=False))
    assert c.output_text == "copper"


def test_retrieve_returns_the_created_object(client):
    """GET /v1/responses/{id} returns exactly what create returned."""
    created = client.responses.create(model=MODEL, input="Reply with: retrieve me",
                                      metadata={"k": "v"})
    got = client.responses.retrieve(created.id)
    assert got.model_dump() == created.model_dump()


def test_delete_then_404(client, server):
    """DELETE answers response.deleted; afterwards GET and DELETE are 404 not_found."""
    created = client.responses.create(model=MODEL, input="Reply with: gone")
    r = server.http.delete(f"/v1/responses/{created.id}")
    assert r.json() == {"id": created.id, "object": "response.deleted", "deleted": True}
    with pytest.raises(openai.NotFoundError) as exc:
        client.responses.retrieve(created.id)
    assert exc.value.body["code"] == "not_found"
    assert server.http.delete(f"/v1/responses/{created.id}").status_code == 404


def test_unknown_id_is_404(server):
    """An id that never existed is 404 for GET, DELETE, cancel and input_items."""
    rid = "resp_" + "0" * 48
    assert server.http.get(f"/v1/responses/{rid}").status_code == 404
    assert server.http.delete(f"/v1/responses/{rid}").status_code == 404
    assert server.http.post(f"/v1/responses/{rid}/cancel").status_code == 404
    assert error_of(server.http.get(f"/v1/responses/{rid}/input_items"))["code"] == "not_found"


def test_input_items_paging_in_both_orders(client):
    """input_items pages with limit/after/order and has_more exactly as OpenAI does."""
    texts = [f"Reply with: w{i}" for i in range(5)]
    created = client.responses.create(
        model=MODEL, input=[{"role": "user", "content": t} for t in texts])
    desc = client.responses.input_items.list(created.id)
    assert [i.content[0].text for i in desc.data] == texts[::-1]      # default: desc
    ids_asc = [i.id for i in client.responses.input_items.list(created.id, order="asc").data]
    assert ids_asc == [i.id for i in desc.data][::-1]

    page1 = client.responses.input_items.list(created.id, order="asc", limit=2)
    assert [i.content[0].text for i in page1.data] == texts[:2]
    assert page1.has_more and page1.first_id == ids_asc[0] and page1.last_id == ids_asc[1]
    page2 = client.responses.input_items.list(created.id, order="asc", limit=2, after=page1.last_id)
    page3 = client.responses.input_items.list(created.id, order="asc", limit=2, after=page2.last_id)
    assert [i.id for i in page2.data + page3.data] == ids_asc[2:]
    assert page2.has_more and not page3.has_more
    every = [i.id for i in client.responses.input_items.list(created.id, order="asc")]
    assert every == ids_asc                                            # SDK auto-paging

    down = client.responses.input_items.list(created.id, order="desc", limit=3)
    assert [i.id for i in down.data] == ids_asc[::-1][:3] and down.has_more


@pytest.mark.parametrize("query,param", [("limit=0", "limit"), ("limit=101", "limit"),
                                         ("order=sideways", "order"), ("after=msg_nope", "after")])
def test_input_items_bad_query_is_400(client, server, query, param):
    """Out-of-range limit, unknown order or unknown cursor are 400s naming the parameter."""
    created = client.responses.create(model=MODEL, input="Reply with: q")
    r = server.http.get(f"/v1/responses/{created.id}/input_items?{query}")
    assert r.status_code == 400 and error_of(r)["param"] == param


def test_input_items_limit_edges(client):
    """limit 1 and 100 are accepted."""
    created = client.responses.create(model=MODEL, input="Reply with: q")
    assert len(client.responses.input_items.list(created.id, limit=1).data) == 1
    assert len(client.responses.input_items.list(created.id, limit=100).data) == 1


def test_conversation_across_turns(client):
    """A conversation replays its transcript and appends each finished turn."""
    conv = f"conv_{uuid.uuid4().hex}"        # unknown id: starts a new conversation
    first = client.responses.create(model=MODEL, input="Reply with: copper 12",
                                    extra_body={"conversation": conv})
    assert first.output_text == "copper 12"
    assert first.conversation.id == conv
    client.responses.create(model=MODEL, input="Reply with: violet",
                            extra_body={"conversation": {"id": conv}})
    third = client.responses.create(model=MODEL, input=RECALL, extra_body={"conversation": conv})
    assert third.output_text == "copper 12"


def test_store_false_is_not_stored_but_still_joins_the_conversation(client):
    """store: false skips the response store (GET 404) but appends to the conversation."""
    conv = f"conv_{uuid.uuid4().hex}"
    first = client.responses.create(model=MODEL, input="Reply with: cedar lake 7", store=False,
                                    extra_body={"conversation": conv})
    assert first.store is False and first.output_text == "cedar lake 7"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    again = client.responses.create(model=MODEL, input=RECALL, extra_body={"conversation": conv})
    assert again.output_text == "cedar lake 7"


def test_output_items_replayed_verbatim_as_input(client):
    """A client may send response.output back as input, parts and ids included."""
    first = client.responses.create(model=MODEL, input="Reply with: verbatim 7")
    replay = [{"role": "user", "content": "Reply with: verbatim 7"},
              *[item.model_dump(exclude_none=True) for item in first.output],
              {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
              {"role": "user", "content": RECALL}]
    again = client.responses.create(model=MODEL, input=replay)
    assert again.output_text == "verbatim 7"


def test_previous_response_id_errors(client, server):
    """Unknown previous_response_id is a 400 naming it; with conversation, a 400 too."""
    r = server.http.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                "previous_response_id": "resp_missing"})
    assert r.status_code == 400 and error_of(r)["param"] == "previous_response_id"
    assert "resp_missing" in error_of(r)["message"]
    a = client.responses.create(model=MODEL, input="Reply with: a")
    r = server.http.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                "previous_response_id": a.id,
                                                "conversation": "conv_1"})
    assert r.status_code == 400 and error_of(r)["param"] == "previous_response_id"


def test_stream_replay_equals_the_live_stream(server):
    """GET ?stream=true replays the stored events; starting_after=N gives the live tail."""
    live = sse_events(server.http.post("/v1/responses", json={
        "model": MODEL, "input": "Reply with: replay me", "stream": True}).text)
    rid = live[0]["response"]["id"]
    replay = sse_events(server.http.get(f"/v1/responses/{rid}?stream=true").text)
    assert replay == live
    tail = sse_events(server.http.get(f"/v1/responses/{rid}?stream=true&starting_after=3").text)
    assert tail == live[4:]


def test_health_shows_store_statistics(client, server):
    """/health reports entries, bytes and evictions of both stores."""
    client.responses.create(model=MODEL, input="Reply with: counted")
    stores = server.health()["stores"]
    assert stores["responses"]["entries"] >= 1 and stores["responses"]["bytes"] > 0
    assert set(stores["responses"]["evictions"]) == {"ttl", "lru", "bytes", "oversize", "deleted"}
    assert stores["conversations"]["max_entries"] == 256


def test_disabled_stores_refuse_their_routes():
    """Entries 0 disables a store: its routes are 400, create itself still works."""
    with run_server("--responses-store-max-entries", "0",
                    "--conversation-store-max-entries", "0") as srv:
        client = srv.client()
        created = client.responses.create(model=MODEL, input="Reply with: nostore")
        assert created.output_text == "nostore"
        for r in (srv.http.get(f"/v1/responses/{created.id}"),
                  srv.http.delete(f"/v1/responses/{created.id}"),
                  srv.http.post(f"/v1/responses/{created.id}/cancel"),
                  srv.http.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                       "previous_response_id": created.id}),
                  srv.http.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                       "conversation": "c"})):
            assert r.status_code == 400, r.text
            assert "disabled" in error_of(r)["message"]


def test_zero_byte_budget_keeps_the_route_alive():
    """Bytes 0: create and GET routes work, but every stored response is evicted at once."""
    with run_server("--responses-store-max-bytes", "0") as srv:
        created = srv.client().responses.create(model=MODEL, input="Reply with: fleeting")
        assert created.output_text == "fleeting"
        r = srv.http.get(f"/v1/responses/{created.id}")
        assert r.status_code == 404
        assert srv.health()["stores"]["responses"]["evictions"]["bytes"] == 1
