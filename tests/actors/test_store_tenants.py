"""The stores' handles scoped to a tenant (`scope`): what one tenant stores, another's handle
over the same store does not find, item index and reasoning echo included; the default
scope's keys are the ids themselves."""

from __future__ import annotations

import json

import attrs
import pytest
import trio

from triode.actors.store import (ConversationStore, ReasoningEchoStore, ResponseStore,
                                 ResponseStoreHandle)
from triode.responses.conversations import conversation_object
from triode.responses.objects import Item, item_of
from triode.storage.records import StoredResponse, encode_json

RECORD = StoredResponse(encode_json({
    "response": {"id": "resp_1", "output": [{"id": "msg_out", "type": "message",
                                             "role": "assistant", "content": []}]},
    "input": [{"id": "msg_in", "type": "message", "role": "user", "content": []}]}),
    encode_json([{"sequence_number": 0}]))


@pytest.mark.trio
async def test_a_response_and_its_items_are_their_tenants_only(nursery):
    store: ResponseStoreHandle = await nursery.start(ResponseStore(
        max_entries=8, max_bytes=100_000, ttl_secs=60).run)
    alice, bob = attrs.evolve(store, scope="alice"), attrs.evolve(store, scope="bob")
    assert await alice.put("resp_1", RECORD)
    assert json.loads((await alice.get("resp_1")).body)["response"]["id"] == "resp_1"
    assert await bob.get("resp_1") is None and await store.get("resp_1") is None
    assert await bob.get_events("resp_1") is None
    assert (await alice.find_item("msg_out")).id == "msg_out"
    assert await bob.find_item("msg_out") is None and await bob.find_item("msg_in") is None
    assert not await bob.delete("resp_1") and not await bob.pin("resp_1")
    assert await alice.get("resp_1") is not None          # bob's delete touched nothing
    assert await store.get("alice/resp_1") is not None    # the key: tenants.scoped
    assert await alice.delete("resp_1") and await alice.find_item("msg_in") is None


def message(mid: str) -> Item:
    return item_of({"type": "message", "id": mid, "role": "user", "status": "completed",
                    "content": [{"type": "input_text", "text": mid}]})


@pytest.mark.trio
async def test_a_conversation_is_its_tenants_only(nursery):
    store = await nursery.start(ConversationStore(max_entries=8, max_bytes=100_000,
                                                  ttl_secs=60).run)
    alice, bob = attrs.evolve(store, scope="alice"), attrs.evolve(store, scope="bob")
    assert await alice.create(conversation_object("conv_1", 1), [message("m1")])
    assert await bob.read("conv_1") is None and await bob.get("conv_1") is None
    assert await bob.extend("conv_1", [message("m2")]) is None
    assert not await bob.remove_item("conv_1", "m1") and not await bob.delete("conv_1")
    assert not await bob.replace_conversation(conversation_object("conv_1", 1))
    assert await bob.append("conv_1", [message("b1")])      # bob's own conversation conv_1
    assert [i.id for i in await alice.get("conv_1")] == ["m1"]
    assert [i.id for i in await bob.get("conv_1")] == ["b1"]


@pytest.mark.trio
async def test_the_reasoning_echo_is_its_tenants_only():
    async with trio.open_nursery() as nursery:
        echo = await nursery.start(ReasoningEchoStore(max_bytes=10_000).run)
        alice, bob = attrs.evolve(echo, scope="alice"), attrs.evolve(echo, scope="bob")
        await alice.remember([("turn", "thought")])
        await trio.testing.wait_all_tasks_blocked()
        assert await alice.recall(["turn"]) == ["thought"]
        assert await bob.recall(["turn"]) == [None]
        assert await echo.recall(["turn"]) == [None]
        nursery.cancel_scope.cancel()
