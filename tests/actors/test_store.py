"""The ResponseStore and ConversationStore actors, driven through their handles."""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

import pytest
import trio
from trio.testing import MockClock

from triode.storage.budget import Evictions
from triode.storage.records import StoredResponse
from triode.actors.store import (
    ConversationStore,
    ConversationStoreHandle,
    ResponseStore,
    ResponseStoreHandle,
)
from triode.errors import StoreDisabled
from triode.responses.objects import Item, item_of
from triode.storage.records import encode_json


@pytest.fixture
def clock() -> MockClock:
    return MockClock(autojump_threshold=0)


def stored_size(response: Any, events: tuple[Any, ...] = ()) -> int:
    """What the response store retains for a put: the compact JSON of both parts."""
    return len(encode_json(response)) + len(encode_json(list(events)))


def stored(record: Any, events: Iterable[Any] = ()) -> StoredResponse:
    """A put's value: any JSON as a stored response's record (the store never reads it)."""
    return StoredResponse(encode_json(record), encode_json(list(events)))


def record_of(found: StoredResponse | None) -> Any:
    """The record's JSON, as it was put."""
    return None if found is None else json.loads(found.body)


def sized_response(n: int) -> dict[str, str]:
    """A response whose stored size (with no events) is exactly `n` bytes (n >= 10)."""
    response = {"t": "x" * (n - 10)}
    assert stored_size(response) == n
    return response


async def start_responses(
    nursery: trio.Nursery, max_entries: int = 8, max_bytes: int = 10_000, ttl_secs: float = 60,
    ephemeral_ttl_secs: float = 600,
) -> ResponseStoreHandle:
    store = ResponseStore(max_entries=max_entries, max_bytes=max_bytes, ttl_secs=ttl_secs,
                          ephemeral_ttl_secs=ephemeral_ttl_secs)
    return await nursery.start(store.run)


async def start_conversations(
    nursery: trio.Nursery, max_entries: int = 8, max_bytes: int = 10_000, ttl_secs: float = 60
) -> ConversationStoreHandle:
    store = ConversationStore(max_entries=max_entries, max_bytes=max_bytes, ttl_secs=ttl_secs)
    return await nursery.start(store.run)


@pytest.mark.trio
async def test_response_round_trips_with_its_events(nursery):
    """A stored response and its stream events come back equal, as fresh copies."""
    responses = await start_responses(nursery)
    response = {"id": "resp_1", "output": [{"type": "message", "content": "héllo"}]}
    events = [{"type": "response.created", "sequence_number": 0}]
    assert await responses.put("resp_1", stored(response, events))
    fetched = record_of(await responses.get("resp_1"))
    assert fetched == response
    fetched["output"].clear()
    assert record_of(await responses.get("resp_1")) == response
    found = await responses.get("resp_1")
    assert found is not None and json.loads(found.event_log) == events
    assert await responses.get("resp_missing") is None
    assert await responses.get_events("resp_missing") is None


@pytest.mark.trio
async def test_response_expires_at_exactly_the_ttl(nursery, clock):
    """A response is readable one tick before its TTL and gone at exactly the TTL."""
    responses = await start_responses(nursery, ttl_secs=10)
    inserted_at = trio.current_time()
    await responses.put("resp_1", stored({"id": "resp_1"}))
    await trio.sleep_until(inserted_at + 10 - 1e-6)
    assert record_of(await responses.get("resp_1")) == {"id": "resp_1"}
    await trio.sleep_until(inserted_at + 10)
    assert await responses.get("resp_1") is None
    assert await responses.get_events("resp_1") is None


@pytest.mark.trio
async def test_conversation_expires_at_exactly_the_ttl_counted_from_creation(nursery, clock):
    """Appends do not restart a transcript's TTL: it is gone exactly ttl after creation."""
    conversations = await start_conversations(nursery, ttl_secs=10)
    created_at = trio.current_time()
    await conversations.append("conv_1", [message("msg_1", "hi")])
    await trio.sleep_until(created_at + 5)
    await conversations.append("conv_1", [message("msg_2", "hello", role="assistant")])
    await trio.sleep_until(created_at + 10 - 1e-6)
    assert len(await conversations.get("conv_1")) == 2
    await trio.sleep_until(created_at + 10)
    assert await conversations.get("conv_1") is None


@pytest.mark.trio
async def test_expired_entries_are_swept_without_reads(nursery, clock):
    """The periodic sweep returns expired entries' memory even if nobody reads them."""
    responses = await start_responses(nursery, ttl_secs=10)
    conversations = await start_conversations(nursery, ttl_secs=10)
    await responses.put("resp_1", stored({"id": "resp_1"}))
    await conversations.append("conv_1", [message("msg_1", "hi")])
    await trio.sleep(20)
    for store in (responses, conversations):
        stats = await store.statistics()
        assert (stats.entries, stats.bytes) == (0, 0)
        assert stats.evictions == Evictions(ttl=1)


@pytest.mark.trio
async def test_lru_eviction_spares_recently_read_responses(nursery):
    """With the entry limit reached, the least recently used response goes, reads count as use."""
    responses = await start_responses(nursery, max_entries=2)
    await responses.put("resp_a", stored({"id": "a"}))
    await responses.put("resp_b", stored({"id": "b"}))
    await responses.get("resp_a")
    await responses.put("resp_c", stored({"id": "c"}))
    assert await responses.get("resp_b") is None
    assert record_of(await responses.get("resp_a")) == {"id": "a"}
    assert record_of(await responses.get("resp_c")) == {"id": "c"}
    assert (await responses.statistics()).evictions == Evictions(lru=1)


@pytest.mark.trio
async def test_byte_budget_fits_exactly_and_evicts_lru_one_byte_over(nursery):
    """Responses totalling exactly max_bytes stay; one byte more evicts the least recent."""
    responses = await start_responses(nursery, max_bytes=100)
    await responses.put("resp_a", stored(sized_response(40)))
    await responses.put("resp_b", stored(sized_response(60)))
    stats = await responses.statistics()
    assert (stats.entries, stats.bytes) == (2, 100)
    await responses.put("resp_b", stored(sized_response(61)))
    assert await responses.get("resp_a") is None
    stats = await responses.statistics()
    assert (stats.entries, stats.bytes) == (1, 61)
    assert stats.evictions == Evictions(bytes=1)


@pytest.mark.trio
async def test_replacing_a_response_replaces_its_bytes(nursery):
    """Putting the same id again counts only the new value's bytes."""
    responses = await start_responses(nursery)
    await responses.put("resp_1", stored(sized_response(500), [{"type": "e"}] * 10))
    await responses.put("resp_1", stored(sized_response(50)))
    stats = await responses.statistics()
    assert (stats.entries, stats.bytes) == (1, 50)
    assert await responses.get_events("resp_1") == []


@pytest.mark.trio
async def test_transcript_bytes_track_its_json_size(nursery):
    """A transcript's bytes are exactly its record's compact JSON: its object, then items."""
    conversations = await start_conversations(nursery)
    first = [message("msg_1", "안녕")]
    second = [message("msg_2", "hi", role="assistant"),
              item_of({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
                       "arguments": "{}", "status": "completed"})]
    assert await conversations.append("conv_1", first)
    transcript = await conversations.get("conv_1")
    assert await conversations.append("conv_1", second)
    assert transcript == first
    assert await conversations.get("conv_1") == first + second
    record = await conversations.read("conv_1")
    assert (await conversations.statistics()).bytes == \
        len(encode_json([record.conversation, *first, *second]))


def conversation(cid: str = "conv_1", **metadata: str) -> dict[str, Any]:
    return {"id": cid, "object": "conversation", "created_at": 1700000000,
            "metadata": metadata}


def message(mid: str, text: str, role: str = "user") -> Item:
    kind = "output_text" if role == "assistant" else "input_text"
    return item_of({"type": "message", "id": mid, "role": role, "status": "completed",
                    "content": [{"type": kind, "text": text}]})


async def stored_bytes(store: ConversationStoreHandle) -> int:
    return (await store.statistics()).bytes


@pytest.mark.trio
async def test_created_conversation_reads_back_as_object_and_items(nursery):
    """create keeps the object and items as one record whose bytes are its exact JSON size."""
    conversations = await start_conversations(nursery)
    items = [message("msg_1", "héllo"), message("msg_2", "there")]
    assert await conversations.create(conversation(k="v"), items)
    record = await conversations.read("conv_1")
    assert (record.conversation, record.items) == (conversation(k="v"), items)
    assert await conversations.get("conv_1") == items
    assert await stored_bytes(conversations) == len(encode_json([conversation(k="v"), *items]))
    assert await conversations.create(conversation("conv_2"))
    assert (await conversations.read("conv_2")).items == []
    assert await conversations.get("conv_2") == []
    assert await conversations.read("conv_missing") is None


@pytest.mark.trio
async def test_implicit_conversation_gets_an_object_made_at_its_first_write(nursery):
    """append to an unknown id creates its object (created_at: now, no metadata) once."""
    conversations = await start_conversations(nursery)
    before = int(time.time())
    await conversations.append("my-id", [message("msg_1", "a")])
    after = int(time.time())
    first = (await conversations.read("my-id")).conversation
    assert first["id"] == "my-id" and first["object"] == "conversation"
    assert before <= first["created_at"] <= after and first["metadata"] == {}
    await conversations.append("my-id", [message("msg_2", "b")])
    record = await conversations.read("my-id")
    assert record.conversation == first
    assert [item.id for item in record.items] == ["msg_1", "msg_2"]


@pytest.mark.trio
async def test_extend_never_creates(nursery):
    """extend appends to an existing conversation and answers None for an unknown one."""
    conversations = await start_conversations(nursery)
    assert await conversations.extend("conv_1", [message("msg_1", "a")]) is None
    assert await conversations.read("conv_1") is None
    assert (await conversations.statistics()).entries == 0
    await conversations.create(conversation())
    assert await conversations.extend("conv_1", [message("msg_1", "a")]) is True
    assert await conversations.get("conv_1") == [message("msg_1", "a")]
    assert await stored_bytes(conversations) == \
        len(encode_json([conversation(), message("msg_1", "a")]))


@pytest.mark.trio
async def test_replacing_the_object_keeps_items_age_and_exact_bytes(nursery, clock):
    """replace_conversation swaps the object only: items stay, the TTL still counts from
    creation, bytes follow the new size; an unknown conversation is False."""
    conversations = await start_conversations(nursery, ttl_secs=10)
    created_at = trio.current_time()
    items = [message("msg_1", "a")]
    await conversations.create(conversation(), items)
    await trio.sleep_until(created_at + 5)
    updated = conversation(key="a longer value than before")
    assert await conversations.replace_conversation(updated)
    record = await conversations.read("conv_1")
    assert (record.conversation, record.items) == (updated, items)
    assert await stored_bytes(conversations) == len(encode_json([updated, *items]))
    assert await conversations.replace_conversation(conversation())
    assert await stored_bytes(conversations) == len(encode_json([conversation(), *items]))
    await trio.sleep_until(created_at + 10 - 1e-6)
    assert await conversations.read("conv_1") is not None
    await trio.sleep_until(created_at + 10)
    assert await conversations.read("conv_1") is None
    assert not await conversations.replace_conversation(conversation())
    assert not await conversations.replace_conversation(conversation("conv_missing"))


@pytest.mark.trio
async def test_an_object_outgrowing_the_byte_budget_drops_the_conversation(nursery):
    """A replaced object that pushes the record past the byte budget drops it as oversize."""
    small = conversation()
    conversations = await start_conversations(nursery, max_bytes=len(encode_json([small])))
    assert await conversations.create(small)
    assert not await conversations.replace_conversation(conversation(k="v"))
    assert await conversations.read("conv_1") is None
    stats = await conversations.statistics()
    assert (stats.entries, stats.bytes, stats.evictions) == (0, 0, Evictions(oversize=1))


@pytest.mark.trio
async def test_removing_an_item_keeps_the_rest_age_and_exact_bytes(nursery, clock):
    """remove_item drops exactly that item, the TTL still counts from creation, bytes shrink
    to the record's JSON size; an unknown item or conversation is False."""
    conversations = await start_conversations(nursery, ttl_secs=10)
    created_at = trio.current_time()
    items = [message("msg_1", "a"), message("msg_2", "b"), message("msg_3", "c")]
    await conversations.create(conversation(), items)
    await trio.sleep_until(created_at + 5)
    assert await conversations.remove_item("conv_1", "msg_2")
    assert await conversations.get("conv_1") == [items[0], items[2]]
    assert await stored_bytes(conversations) == len(encode_json([conversation(), items[0],
                                                                 items[2]]))
    assert not await conversations.remove_item("conv_1", "msg_2")
    assert not await conversations.remove_item("conv_missing", "msg_1")
    for item in (items[0], items[2]):
        assert await conversations.remove_item("conv_1", item.id)
    assert await conversations.get("conv_1") == []
    assert await stored_bytes(conversations) == len(encode_json([conversation()]))
    await trio.sleep_until(created_at + 10)
    assert await conversations.read("conv_1") is None


@pytest.mark.trio
async def test_remove_item_matches_the_item_id_not_text_that_mentions_it(nursery):
    """An item that merely mentions another item's id (a call_id, its text) is kept."""
    conversations = await start_conversations(nursery)
    decoys = [item_of({"type": "function_call_output", "id": "fco_1", "call_id": "msg_2",
                       "output": "x", "status": "completed"}), message("msg_1", '"msg_2"')]
    await conversations.create(conversation(), [*decoys, message("msg_2", "b")])
    assert await conversations.remove_item("conv_1", "msg_2")
    assert await conversations.get("conv_1") == decoys


@pytest.mark.trio
async def test_created_conversations_count_against_the_entry_limit(nursery):
    """With one entry allowed, a new conversation evicts the least recently used one."""
    conversations = await start_conversations(nursery, max_entries=1)
    await conversations.create(conversation("conv_a"))
    await conversations.create(conversation("conv_b"))
    assert await conversations.read("conv_a") is None
    assert await conversations.read("conv_b") is not None
    assert (await conversations.statistics()).evictions == Evictions(lru=1)


@pytest.mark.trio
async def test_zero_entries_refuses_every_conversation_call(nursery):
    """max_entries 0: the Conversations API's store calls raise StoreDisabled too."""
    conversations = await start_conversations(nursery, max_entries=0)
    calls = [
        conversations.create(conversation()),
        conversations.read("conv_1"),
        conversations.extend("conv_1", []),
        conversations.replace_conversation(conversation()),
        conversations.remove_item("conv_1", "msg_1"),
    ]
    for call in calls:
        with pytest.raises(StoreDisabled):
            await call


@pytest.mark.trio
async def test_delete_removes_and_reports_whether_anything_was_there(nursery):
    """delete returns True once for a stored entry and False afterwards."""
    responses = await start_responses(nursery)
    conversations = await start_conversations(nursery)
    await responses.put("resp_1", stored({"id": "resp_1"}))
    await conversations.append("conv_1", [message("msg_1", "hi")])
    for store, key in ((responses, "resp_1"), (conversations, "conv_1")):
        assert await store.delete(key)
        assert not await store.delete(key)
        assert await store.get(key) is None
        assert (await store.statistics()).evictions == Evictions(deleted=1)


@pytest.mark.trio
async def test_zero_entries_disables_the_store(nursery):
    """max_entries 0 makes every data call raise StoreDisabled; statistics still answer."""
    responses = await start_responses(nursery, max_entries=0)
    conversations = await start_conversations(nursery, max_entries=0)
    calls = [
        responses.put("resp_1", stored({})),
        responses.get("resp_1"),
        responses.get_events("resp_1"),
        responses.delete("resp_1"),
        responses.pin("resp_1"),
        responses.unpin("resp_1"),
        conversations.get("conv_1"),
        conversations.append("conv_1", []),
        conversations.delete("conv_1"),
    ]
    for call in calls:
        with pytest.raises(StoreDisabled):
            await call
    assert (await responses.statistics()).max_entries == 0
    assert (await conversations.statistics()).entries == 0


@pytest.mark.trio
async def test_zero_bytes_accepts_and_evicts_at_once(nursery):
    """max_bytes 0 keeps the routes alive: puts and appends succeed but nothing is kept."""
    responses = await start_responses(nursery, max_bytes=0)
    conversations = await start_conversations(nursery, max_bytes=0)
    assert await responses.put("resp_1", stored({"id": "resp_1"})) is False
    assert await responses.get("resp_1") is None
    assert await conversations.append("conv_1", ["hi"]) is False
    assert await conversations.get("conv_1") is None
    for store in (responses, conversations):
        stats = await store.statistics()
        assert (stats.entries, stats.bytes, stats.evictions) == (0, 0, Evictions(bytes=1))


@pytest.mark.trio
async def test_zero_ttl_never_expires(nursery, clock):
    """ttl_secs 0 keeps entries indefinitely."""
    responses = await start_responses(nursery, ttl_secs=0)
    await responses.put("resp_1", stored({"id": "resp_1"}))
    await trio.sleep(100 * 365 * 24 * 3600)
    assert record_of(await responses.get("resp_1")) == {"id": "resp_1"}


@pytest.mark.trio
async def test_oversize_response_is_not_kept(nursery):
    """A response larger than the whole byte budget is refused without evicting others."""
    responses = await start_responses(nursery, max_bytes=100)
    await responses.put("resp_small", stored(sized_response(50)))
    assert await responses.put("resp_big", stored(sized_response(101))) is False
    assert await responses.get("resp_big") is None
    assert await responses.get("resp_small") is not None
    assert (await responses.statistics()).evictions == Evictions(oversize=1)


@pytest.mark.trio
async def test_pinned_response_survives_ttl_and_lru_until_unpinned(nursery, clock):
    """A pinned response outlives its TTL and newer entries; unpinning restarts its TTL."""
    responses = await start_responses(nursery, max_entries=2, ttl_secs=10)
    assert await responses.put("resp_job", stored({"status": "in_progress"}), pinned=True)
    for n in range(5):
        await responses.put(f"resp_{n}", stored({"n": n}))
    await trio.sleep(100)
    assert record_of(await responses.get("resp_job")) == {"status": "in_progress"}
    stats = await responses.statistics()
    assert (stats.entries, stats.pinned_entries) == (1, 1)
    unpinned_at = trio.current_time()
    assert await responses.unpin("resp_job")
    await trio.sleep_until(unpinned_at + 10 - 1e-6)
    assert await responses.get("resp_job") is not None
    await trio.sleep_until(unpinned_at + 10)
    assert await responses.get("resp_job") is None


@pytest.mark.trio
async def test_ephemeral_response_lives_exactly_the_ephemeral_ttl(nursery, clock):
    """A finished background + store:false response is readable for the ephemeral TTL, even
    when stored responses never expire, and the sweep frees it unread."""
    responses = await start_responses(nursery, ttl_secs=0, ephemeral_ttl_secs=30)
    put_at = trio.current_time()
    assert await responses.put("resp_eph", stored({"status": "completed"}), ephemeral=True)
    await responses.put("resp_kept", stored({"status": "completed"}))
    await trio.sleep_until(put_at + 30 - 1e-6)
    assert record_of(await responses.get("resp_eph")) == {"status": "completed"}
    await trio.sleep(60)  # past the TTL, and long enough for a sweep
    stats = await responses.statistics()
    assert (stats.entries, stats.evictions) == (1, Evictions(ttl=1))
    assert await responses.get("resp_eph") is None
    assert await responses.get("resp_kept") is not None


@pytest.mark.trio
async def test_pinned_put_over_budget_is_refused_and_evicts_nothing(nursery):
    """A pinned put past the byte budget is refused and leaves stored responses alone."""
    responses = await start_responses(nursery, max_bytes=100)
    await responses.put("resp_stored", stored(sized_response(90)))
    assert await responses.put("resp_job1", stored(sized_response(60)), pinned=True)
    assert await responses.put("resp_job2", stored(sized_response(41)), pinned=True) is False
    assert await responses.get("resp_stored") is not None
    assert await responses.pin("resp_stored") is False


@pytest.mark.trio
async def test_pinned_put_counts_its_reserve(nursery):
    """A pinned put counts as the larger of its size and its reserve: at exactly the budget
    it is accepted, one byte over it is refused; a reserve below the size changes nothing."""
    responses = await start_responses(nursery, max_bytes=100)
    assert await responses.put("resp_job1", stored(sized_response(10)), pinned=True, reserve=60)
    assert (await responses.statistics()).pinned_bytes == 60
    assert await responses.put("resp_job2", stored(sized_response(10)), pinned=True, reserve=41) is False
    assert await responses.put("resp_job2", stored(sized_response(10)), pinned=True, reserve=40)
    assert (await responses.statistics()).pinned_bytes == 100
    assert await responses.delete("resp_job2")
    assert await responses.put("resp_job3", stored(sized_response(30)), pinned=True, reserve=1)
    assert (await responses.statistics()).pinned_bytes == 90


async def test_reasoning_echo_remembers_within_its_byte_budget():
    """The echo store recalls remembered turns, evicts least recently used past its byte
    budget, and with budget 0 remembers nothing."""
    from triode.actors.store import ReasoningEchoStore

    async with trio.open_nursery() as nursery:
        echo = await nursery.start(ReasoningEchoStore(max_bytes=2 * (len("k1") + 10)).run)
        await echo.remember([("k1", "a" * 10), ("k2", "b" * 10)])
        assert await echo.recall(["k1", "k2", "zz"]) == ["a" * 10, "b" * 10, None]
        await echo.remember([("k3", "c" * 10)])          # k1 is least recent: evicted
        assert await echo.recall(["k1", "k2", "k3"]) == [None, "b" * 10, "c" * 10]
        off = await nursery.start(ReasoningEchoStore(max_bytes=0).run)
        await off.remember([("k1", "x")])
        assert await off.recall(["k1"]) == [None] and not off.enabled
        nursery.cancel_scope.cancel()
