"""The stores: responses, conversations and the reasoning echo, one actor each, each owning
its `Entries` (storage/backend.py): a BudgetedMap in this process, or the same policy in a
shared store, Redis (`--store redis://...`, storage/redis.py) or a SQLite file
(`--store sqlite:///PATH`, storage/sqlite*.py), where any process serves any id.

Values cross the mailbox as compact JSON bytes, encoded and decoded in the caller's task by
the handle. That keeps retained memory close to the byte budget (a parsed response with its
stream events takes three to four times its JSON size), gives callers fresh objects that
cannot alias the store's state, and makes every entry's size exact: the length of what is
kept, which `approx_json_bytes` estimates for callers that need a size before encoding.

Each actor serves its mailbox as budgeted.py says (expired entries swept as they expire; a
shared store's operations in worker threads, answering StoreUnavailable, a 503 with
Retry-After, while its backend cannot serve them); the records it keeps are
storage/records.py's.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Callable, Iterable

import attrs
import trio

from ..responses.conversations import conversation_object
from ..responses.objects import Item, StreamEvent
from ..storage.backend import Backend
from ..storage.budget import BudgetStatistics
from ..storage.memory import MEMORY
from ..responses.conversations import ConversationObject
from ..storage.records import ConversationRecord, StoredResponse, decode_items, encode_json
from ..tenants import DEFAULT_SCOPE, scoped
from .budgeted import (MAILBOX_SIZE, BudgetedStore, GetStatistics, Operation, Ping,
                       StoreHandle)
from .mailbox import ReplyChannel, ask


# The response store's mailbox.


@attrs.frozen
class PutResponse:
    response_id: str
    stored: StoredResponse
    pinned: bool
    ephemeral: bool
    reserve: int          # the least it counts as (see ResponseStoreHandle.put)
    item_ids: tuple[str, ...]   # its input and output items' ids, for FindItem
    reply: ReplyChannel[bool]


@attrs.frozen
class FindItem:
    """The stored response holding an input or output item with this id, if any."""

    item_id: str
    reply: ReplyChannel["StoredResponse | None"]


@attrs.frozen
class GetResponse:
    response_id: str
    reply: ReplyChannel["StoredResponse | None"]


@attrs.frozen
class DeleteResponse:
    response_id: str
    reply: ReplyChannel[bool]


@attrs.frozen
class PinResponse:
    response_id: str
    reply: ReplyChannel[bool]


@attrs.frozen
class UnpinResponse:
    response_id: str
    reply: ReplyChannel[bool]


ResponseStoreMessage = (
    PutResponse
    | GetResponse
    | DeleteResponse
    | PinResponse
    | UnpinResponse
    | FindItem
    | GetStatistics
    | Ping
)


# The conversation store's mailbox. A conversation's record is a list of compact JSON
# values: its object first (`responses.conversations.conversation_object`), then its items.


@attrs.frozen
class PutConversation:
    """A new conversation (the API's create): its whole record."""

    conversation_id: str
    record: tuple[bytes, ...]
    reply: ReplyChannel[bool]


@attrs.frozen
class GetConversation:
    conversation_id: str
    reply: ReplyChannel["tuple[bytes, ...] | None"]   # the record


@attrs.frozen
class AppendConversation:
    conversation_id: str
    items: tuple[bytes, ...]
    # The object of the conversation this append creates if there is none; None: extend
    # only an existing one (else the reply is None).
    created: bytes | None
    reply: ReplyChannel["bool | None"]


@attrs.frozen
class ReplaceConversationObject:
    conversation_id: str
    conversation: bytes
    reply: ReplyChannel[bool]


@attrs.frozen
class RemoveConversationItem:
    conversation_id: str
    item: bytes             # the item's record entry, exactly as read
    reply: ReplyChannel[bool]


@attrs.frozen
class DeleteConversation:
    conversation_id: str
    reply: ReplyChannel[bool]


ConversationStoreMessage = (
    PutConversation
    | GetConversation
    | AppendConversation
    | ReplaceConversationObject
    | RemoveConversationItem
    | DeleteConversation
    | GetStatistics
    | Ping
)



@attrs.frozen
class ResponseStoreHandle(StoreHandle):
    async def put(
        self, response_id: str, stored: StoredResponse, pinned: bool = False,
        ephemeral: bool = False, reserve: int = 0,
    ) -> bool:
        """Stores a response's record and its stream events; returns whether it is retained.

        A pinned put (an active background job) is refused, returning False, when the
        pinned total would exceed the byte budget; it never evicts stored responses. It
        counts as at least `reserve` bytes, so that what replaces it when the job ends can
        be made to fit. An ephemeral put (a finished `background` + `store: false`
        response) lives for the ephemeral TTL instead of the store's.
        """
        self.check_enabled()
        # Items of a continuable response can be named by item_reference later.
        item_ids = () if ephemeral else tuple(self._key(i) for i in stored.item_ids())
        return await ask(
            self._inbox,
            lambda reply: PutResponse(self._key(response_id), stored, pinned, ephemeral, reserve,
                                      item_ids, reply),
        )

    async def find_item(self, item_id: str) -> Item | None:
        """An input or output item of a stored (continuable) response, by its id; counts as
        a use of that response for LRU."""
        self.check_enabled()
        stored: StoredResponse | None = await ask(self._inbox,
                                                  lambda reply: FindItem(self._key(item_id), reply))
        return None if stored is None else stored.find_item(item_id)

    async def get(self, response_id: str) -> StoredResponse | None:
        """Returns the stored response, or None; counts as a use for LRU."""
        return await self._get_stored(response_id)

    async def get_events(self, response_id: str) -> list[StreamEvent] | None:
        """Returns the stored stream events, or None; counts as a use for LRU."""
        stored = await self._get_stored(response_id)
        return None if stored is None else stored.events()

    async def delete(self, response_id: str) -> bool:
        self.check_enabled()
        return await ask(self._inbox, lambda reply: DeleteResponse(self._key(response_id),
                                                                   reply))

    async def pin(self, response_id: str) -> bool:
        """Takes a stored response out of TTL and LRU; False if absent or over budget."""
        self.check_enabled()
        return await ask(self._inbox, lambda reply: PinResponse(self._key(response_id), reply))

    async def unpin(self, response_id: str) -> bool:
        """Makes a pinned response ordinary, its TTL starting now; False if not retained."""
        self.check_enabled()
        return await ask(self._inbox, lambda reply: UnpinResponse(self._key(response_id),
                                                                  reply))

    async def _get_stored(self, response_id: str) -> StoredResponse | None:
        self.check_enabled()
        return await ask(self._inbox, lambda reply: GetResponse(self._key(response_id), reply))


@attrs.frozen
class ConversationStoreHandle(StoreHandle):
    async def create(self, conversation: ConversationObject, items: Iterable[Item] = ()
                     ) -> bool:
        """Stores a new conversation (keyed by its object's id) with its first items;
        returns whether it is retained."""
        self.check_enabled()
        record = (encode_json(conversation), *(encode_json(item) for item in items))
        return await ask(self._inbox,
                         lambda reply: PutConversation(self._key(conversation["id"]), record,
                                                       reply))

    async def read(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation's object and items, or None; counts as a use for LRU."""
        record = await self._record(conversation_id)
        if record is None:
            return None
        return ConversationRecord.decode(record)

    async def get(self, conversation_id: str) -> list[Item] | None:
        """Returns a fresh copy of the transcript (the items, typed), or None; counts as a
        use for LRU."""
        record = await self._record(conversation_id)
        return None if record is None else decode_items(record[1:])

    async def append(self, conversation_id: str, items: Iterable[Item]) -> bool:
        """Appends transcript items, creating the conversation if unknown (created now, no
        metadata); returns whether it is retained (a transcript that outgrows the byte
        budget is dropped)."""
        created = encode_json(conversation_object(conversation_id, int(time.time())))
        return await self._append(conversation_id, items, created) is True

    async def extend(self, conversation_id: str, items: Iterable[Item]) -> bool | None:
        """Appends items to an existing conversation: None when there is none, else whether
        it is retained (as `append`)."""
        return await self._append(conversation_id, items, None)

    async def replace_conversation(self, conversation: ConversationObject) -> bool:
        """Replaces a conversation's object (keyed by its id), keeping its items and age;
        False when there is no such conversation or it no longer fits the byte budget."""
        self.check_enabled()
        cid, encoded = self._key(conversation["id"]), encode_json(conversation)
        return await ask(self._inbox,
                         lambda reply: ReplaceConversationObject(cid, encoded, reply))

    async def remove_item(self, conversation_id: str, item_id: str) -> bool:
        """Removes the first item with this id, keeping the conversation's age; False when
        there is no such conversation or item."""
        record = await self._record(conversation_id)
        needle = encode_json(item_id)
        found = next((raw for raw in (record or ())[1:]
                      if needle in raw and json.loads(raw).get("id") == item_id), None)
        if found is None:
            return False
        return await ask(self._inbox,
                         lambda reply: RemoveConversationItem(self._key(conversation_id), found,
                                                              reply))

    async def delete(self, conversation_id: str) -> bool:
        self.check_enabled()
        return await ask(self._inbox, lambda reply: DeleteConversation(
            self._key(conversation_id), reply))

    async def _record(self, conversation_id: str) -> tuple[bytes, ...] | None:
        self.check_enabled()
        return await ask(self._inbox, lambda reply: GetConversation(self._key(conversation_id),
                                                                    reply))

    async def _append(self, conversation_id: str, items: Iterable[Any], created: bytes | None
                      ) -> bool | None:
        self.check_enabled()
        encoded = tuple(encode_json(item) for item in items)
        return await ask(self._inbox, lambda reply: AppendConversation(
            self._key(conversation_id), encoded, created, reply))



class ResponseStore(BudgetedStore):
    name = "responses"
    disabled_reason = "response storage is disabled (--responses-store-max-entries is 0)"

    def __init__(self, *, ephemeral_ttl_secs: float = 600, **budgets: Any) -> None:
        super().__init__(**budgets)
        self._ephemeral_ttl = ephemeral_ttl_secs

    async def run(
        self, *, task_status: trio.TaskStatus[ResponseStoreHandle] = trio.TASK_STATUS_IGNORED
    ) -> None:
        send, inbox = trio.open_memory_channel[ResponseStoreMessage](MAILBOX_SIZE)
        task_status.started(ResponseStoreHandle(send, self._disabled, self._entries.blocking,
                                                self._entries.kind))
        await self._serve(inbox, self._operation)

    def _operation(self, msg: ResponseStoreMessage) -> Operation:
        entries, now = self._entries, self._now()
        match msg:
            case PutResponse(reply=reply):
                ttl = self._ephemeral_ttl if msg.ephemeral else None
                return reply, lambda: entries.put(
                    msg.response_id, [msg.stored.body, msg.stored.event_log], now,
                    size=max(msg.stored.size, msg.reserve), pinned=msg.pinned, ttl_secs=ttl,
                    index=msg.item_ids)
            case FindItem(item_id, reply):
                return reply, lambda: _stored(entries.find(item_id, now))
            case GetResponse(response_id, reply):
                return reply, lambda: _stored(entries.get(response_id, now))
            case DeleteResponse(response_id, reply):
                return reply, lambda: entries.delete(response_id, now)
            case PinResponse(response_id, reply):
                return reply, lambda: entries.pin(response_id, now)
            case UnpinResponse(response_id, reply):
                return reply, lambda: entries.unpin(response_id, now)
            case GetStatistics(reply):
                return reply, entries.statistics
            case Ping(reply):
                return reply, entries.ping


def _stored(values: list[bytes] | None) -> StoredResponse | None:
    return None if values is None else StoredResponse(values[0], values[1])


class ConversationStore(BudgetedStore):
    """Each entry is a conversation's record, a list of compact JSON values (its object,
    then its items); its size is the length of that record as one JSON array."""

    name = "conversations"
    disabled_reason = "conversation storage is disabled (--conversation-store-max-entries is 0)"

    async def run(
        self, *, task_status: trio.TaskStatus[ConversationStoreHandle] = trio.TASK_STATUS_IGNORED
    ) -> None:
        send, inbox = trio.open_memory_channel[ConversationStoreMessage](MAILBOX_SIZE)
        task_status.started(ConversationStoreHandle(send, self._disabled,
                                                    self._entries.blocking,
                                                    self._entries.kind))
        await self._serve(inbox, self._operation)

    def _operation(self, msg: ConversationStoreMessage) -> Operation:
        entries, now = self._entries, self._now()
        match msg:
            case PutConversation(conversation_id, record, reply):
                return reply, lambda: entries.put(conversation_id, list(record), now,
                                                  size=_array_bytes(record))
            case GetConversation(conversation_id, reply):
                return reply, lambda: _snapshot(entries.get(conversation_id, now))
            case AppendConversation(conversation_id, items, created, reply):
                return reply, lambda: entries.append(
                    conversation_id, items, now, size=sum(len(item) for item in items),
                    first=created, create=created is not None)
            case ReplaceConversationObject(conversation_id, conversation, reply):
                return reply, lambda: entries.set_first(conversation_id, conversation, now)
            case RemoveConversationItem(conversation_id, item, reply):
                return reply, lambda: entries.remove_value(conversation_id, item, now)
            case DeleteConversation(conversation_id, reply):
                return reply, lambda: entries.delete(conversation_id, now)
            case GetStatistics(reply):
                return reply, entries.statistics
            case Ping(reply):
                return reply, entries.ping


def _array_bytes(values: tuple[bytes, ...]) -> int:
    """The length of the JSON array of these encoded values."""
    return sum(len(v) for v in values) + len("[]") + max(len(values) - 1, 0)


def _snapshot(items: list[bytes] | None) -> tuple[bytes, ...] | None:
    """A tuple copy, so later changes never show through a record already handed out."""
    return None if items is None else tuple(items)


# ---- the reasoning echo store ---------------------------------------------------------------
# Remembers the reasoning of assistant turns triode returned, keyed by the turn's visible
# content, so a client that later resends the turn without its reasoning item gets it back
# in the prompt (rendered as generated). Budget: bytes only (MLXCEL_REASONING_ECHO_MAX_BYTES);
# 0 disables it. LRU; no TTL.

ECHO_MAX_ENTRIES = 1_000_000


@attrs.frozen
class RememberReasoning:
    turns: tuple[tuple[str, str], ...]     # (turn key, reasoning text)


@attrs.frozen
class RecallReasoning:
    keys: tuple[str, ...]
    reply: ReplyChannel["list[str | None]"]


ReasoningEchoMessage = RememberReasoning | RecallReasoning | GetStatistics


@attrs.frozen
class ReasoningEchoHandle:
    _inbox: trio.MemorySendChannel[ReasoningEchoMessage]
    enabled: bool
    scope: str = DEFAULT_SCOPE    # whose turns (tenants.scoped), as the other stores' handles

    async def remember(self, turns: Iterable[tuple[str, str]]) -> None:
        turns = tuple((scoped(self.scope, key), text) for key, text in turns)
        if self.enabled and turns:
            await self._inbox.send(RememberReasoning(turns))

    async def recall(self, keys: Iterable[str]) -> list[str | None]:
        keys = tuple(scoped(self.scope, key) for key in keys)
        if not self.enabled or not keys:
            return [None] * len(keys)
        return await ask(self._inbox, lambda reply: RecallReasoning(keys, reply))

    async def statistics(self) -> BudgetStatistics:
        return await ask(self._inbox, GetStatistics)


class ReasoningEchoStore(BudgetedStore):
    name = "reasoning-echo"
    disabled_reason = "the reasoning echo is disabled (its byte budget is 0)"

    def __init__(self, *, max_bytes: int, clock: Callable[[], float] = trio.current_time,
                 backend: Backend = MEMORY):
        super().__init__(max_entries=ECHO_MAX_ENTRIES if max_bytes else 0, max_bytes=max_bytes,
                         ttl_secs=0, clock=clock, backend=backend)

    async def run(
        self, *, task_status: trio.TaskStatus[ReasoningEchoHandle] = trio.TASK_STATUS_IGNORED
    ) -> None:
        send, inbox = trio.open_memory_channel[ReasoningEchoMessage](MAILBOX_SIZE)
        task_status.started(ReasoningEchoHandle(send, self._entries.max_entries > 0))
        await self._serve(inbox, self._operation)

    def _operation(self, msg: ReasoningEchoMessage) -> Operation:
        entries, now = self._entries, self._now()
        match msg:
            case RememberReasoning(turns):
                def remember() -> None:
                    for key, text in turns:
                        encoded = text.encode()
                        entries.put(_echo_key(key), [encoded], now,
                                    size=len(encoded) + len(key))
                return None, remember
            case RecallReasoning(keys, reply):
                def recall() -> list[str | None]:
                    found = [entries.get(_echo_key(k), now) for k in keys]
                    return [None if f is None else f[0].decode() for f in found]
                return reply, recall
            case GetStatistics(reply):
                return reply, entries.statistics


def _echo_key(key: str) -> str:
    """Turn keys are whole assistant turns: a fixed-size digest names them."""
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
