"""The Conversations service over the real conversation store: each call reads and writes its
caller's conversations, a missing one is a 404 naming what is missing, and a disabled store
answers every call with the same 400 whatever else is wrong."""

from __future__ import annotations

import pytest

from triode.actors.store import ConversationStore
from triode.errors import NotFound, StoreDisabled
from triode.responses.conversations import ConversationUpdate, NewConversation, NewItems
from triode.responses.convert import structure
from triode.service.conversations import Conversations
from triode.tenants import Caller, Tenant

from .conftest import CALLER, start_service

OTHER = Caller(Tenant("other"))


def new(**body) -> NewConversation:
    return structure(body, NewConversation)


async def service(nursery) -> Conversations:
    return Conversations((await start_service(nursery)).conversations, clock=lambda: 1234.9)


async def test_a_created_conversation_reads_back_with_its_items(nursery):
    """create answers the object (created_at from the clock, in whole seconds); its items
    are listed, and each can be read by its id."""
    conversations = await service(nursery)
    made = await conversations.create(CALLER, new(items=[{"role": "user", "content": "hi"}],
                                                  metadata={"topic": "x"}))
    assert (made["object"], made["created_at"], made["metadata"]) == (
        "conversation", 1234, {"topic": "x"})
    assert made["id"].startswith("conv_")
    assert await conversations.retrieve(CALLER, made["id"]) == made
    listed = await conversations.list_items(CALLER, made["id"])
    [item] = listed["data"]
    assert item["role"] == "user"
    assert await conversations.item(CALLER, made["id"], item["id"]) == item


async def test_another_caller_does_not_find_it(nursery):
    """Another tenant's calls about the same id are 404s naming the conversation."""
    conversations = await service(nursery)
    made = await conversations.create(CALLER, new())
    for call in (conversations.retrieve(OTHER, made["id"]),
                 conversations.list_items(OTHER, made["id"]),
                 conversations.add_items(OTHER, made["id"], structure(
                     {"items": [{"role": "user", "content": "x"}]}, NewItems))):
        with pytest.raises(NotFound) as missing:
            await call
        assert missing.value.param == "conversation_id"
    assert await conversations.retrieve(CALLER, made["id"]) == made


async def test_items_are_added_in_order_and_removed_by_id(nursery):
    """add_items appends (its answer lists what it added); delete_item removes one, and a
    second delete of it is a 404 naming the item."""
    conversations = await service(nursery)
    made = await conversations.create(CALLER, new(items=[{"role": "user", "content": "a"}]))
    added = await conversations.add_items(CALLER, made["id"], structure(
        {"items": [{"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]},
        NewItems))
    assert [item["role"] for item in added["data"]] == ["assistant", "user"]
    listed = await conversations.list_items(CALLER, made["id"], order="asc")
    assert [item["id"] for item in listed["data"]][1:] == [item["id"] for item in added["data"]]
    gone = added["data"][0]["id"]
    assert await conversations.delete_item(CALLER, made["id"], gone) == made
    with pytest.raises(NotFound) as missing:
        await conversations.delete_item(CALLER, made["id"], gone)
    assert missing.value.param == "item_id"
    assert len((await conversations.list_items(CALLER, made["id"]))["data"]) == 2


async def test_update_replaces_the_metadata_and_delete_ends_the_conversation(nursery):
    """The new metadata replaces the old one whole (null clears it); after delete the
    conversation is not found, and a second delete is a 404."""
    conversations = await service(nursery)
    made = await conversations.create(CALLER, new(metadata={"a": "1", "b": "2"}))
    updated = await conversations.update(CALLER, made["id"], structure(
        {"metadata": {"c": "3"}}, ConversationUpdate))
    assert updated == {**made, "metadata": {"c": "3"}}
    assert await conversations.retrieve(CALLER, made["id"]) == updated
    cleared = await conversations.update(CALLER, made["id"], structure(
        {"metadata": None}, ConversationUpdate))
    assert cleared["metadata"] == {}
    assert (await conversations.delete(CALLER, made["id"]))["deleted"] is True
    with pytest.raises(NotFound):
        await conversations.retrieve(CALLER, made["id"])
    with pytest.raises(NotFound):
        await conversations.delete(CALLER, made["id"])


async def test_a_disabled_store_refuses_every_call_before_looking_at_it(nursery):
    """With the store off, even a call with a bad query value or an unknown id is refused
    as disabled."""
    store = await nursery.start(ConversationStore(max_entries=0, max_bytes=0,
                                                  ttl_secs=60).run)
    conversations = Conversations(store)
    with pytest.raises(StoreDisabled):
        await conversations.create(CALLER, new())
    with pytest.raises(StoreDisabled):
        await conversations.list_items(CALLER, "conv_nope", limit="not a number")
    with pytest.raises(StoreDisabled):
        await conversations.delete(CALLER, "conv_nope")
