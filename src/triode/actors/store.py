"""The response store and the conversation store: one actor each, each owning a BudgetedMap.

Values cross the mailbox as compact JSON bytes, encoded and decoded in the caller's task by
the handle. That keeps retained memory close to the byte budget (a parsed response with its
stream events takes three to four times its JSON size), gives callers fresh objects that
cannot alias the store's state, and makes every entry's size exact: the length of what is
kept, which `approx_json_bytes` estimates for callers that need a size before encoding.

Expired entries are freed by a sweep at the moment the next one expires (the actor waits on
its mailbox with that deadline), so memory comes back even if nobody reads them, and a
store whose entries never expire never wakes.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Callable, Hashable, Iterable

import attrs
import trio

from ..errors import StoreDisabled
from ..responses.conversations import conversation_object
from .budget import BudgetedMap, BudgetStatistics
from .mailbox import ReplyChannel, answer, ask

MAILBOX_SIZE = 64


def encode_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@attrs.frozen
class StoredResponse:
    body: bytes
    events: bytes

    @classmethod
    def of(cls, response: Any, events: Iterable[Any] = ()) -> "StoredResponse":
        return cls(encode_json(response), encode_json(list(events)))

    @property
    def size(self) -> int:
        """The bytes it counts against the store's budget."""
        return len(self.body) + len(self.events)


# Messages shared by both mailboxes.


@attrs.frozen
class GetStatistics:
    reply: ReplyChannel[BudgetStatistics]


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
)


@attrs.frozen
class _StoreHandle:
    _inbox: trio.MemorySendChannel[Any]
    _disabled_reason: str | None

    def check_enabled(self) -> None:
        """Raises StoreDisabled when the store was configured off."""
        if self._disabled_reason is not None:
            raise StoreDisabled(self._disabled_reason)

    async def statistics(self) -> BudgetStatistics:
        """Works on a disabled store too, so /health can report it."""
        return await ask(self._inbox, GetStatistics)


@attrs.frozen
class ResponseStoreHandle(_StoreHandle):
    async def put(
        self, response_id: str, response: Any, events: Iterable[Any] = (), pinned: bool = False,
        ephemeral: bool = False, reserve: int = 0,
    ) -> bool:
        """Stores a response object and its stream events; returns whether it is retained.

        A pinned put (an active background job) is refused, returning False, when the
        pinned total would exceed the byte budget; it never evicts stored responses. It
        counts as at least `reserve` bytes, so that what replaces it when the job ends can
        be made to fit. An ephemeral put (a finished `background` + `store: false`
        response) lives for the ephemeral TTL instead of the store's.
        """
        self.check_enabled()
        stored = StoredResponse.of(response, events)
        # Items of a continuable response can be named by item_reference later.
        item_ids = () if ephemeral else tuple(
            item["id"] for item in [*response.get("input", ()),
                                    *response.get("response", {}).get("output", ())]
            if isinstance(item.get("id"), str))
        return await ask(
            self._inbox,
            lambda reply: PutResponse(response_id, stored, pinned, ephemeral, reserve,
                                      item_ids, reply),
        )

    async def find_item(self, item_id: str) -> dict[str, Any] | None:
        """An input or output item of a stored (continuable) response, by its id; counts as
        a use of that response for LRU."""
        self.check_enabled()
        stored: StoredResponse | None = await ask(self._inbox,
                                                  lambda reply: FindItem(item_id, reply))
        if stored is None:
            return None
        record = json.loads(stored.body)
        found: dict[str, Any] | None = next(
            (item for item in [*record["input"], *record["response"]["output"]]
             if item.get("id") == item_id), None)
        return found

    async def get(self, response_id: str) -> Any | None:
        """Returns a fresh copy of the stored response, or None; counts as a use for LRU."""
        stored = await self._get_stored(response_id)
        return None if stored is None else json.loads(stored.body)

    async def get_events(self, response_id: str) -> list[Any] | None:
        """Returns the stored stream events, or None; counts as a use for LRU."""
        stored = await self._get_stored(response_id)
        return None if stored is None else json.loads(stored.events)

    async def delete(self, response_id: str) -> bool:
        self.check_enabled()
        return await ask(self._inbox, lambda reply: DeleteResponse(response_id, reply))

    async def pin(self, response_id: str) -> bool:
        """Takes a stored response out of TTL and LRU; False if absent or over budget."""
        self.check_enabled()
        return await ask(self._inbox, lambda reply: PinResponse(response_id, reply))

    async def unpin(self, response_id: str) -> bool:
        """Makes a pinned response ordinary, its TTL starting now; False if not retained."""
        self.check_enabled()
        return await ask(self._inbox, lambda reply: UnpinResponse(response_id, reply))

    async def _get_stored(self, response_id: str) -> StoredResponse | None:
        self.check_enabled()
        return await ask(self._inbox, lambda reply: GetResponse(response_id, reply))


@attrs.frozen
class ConversationRecord:
    """A conversation as read: its object and its items (fresh copies)."""

    conversation: dict[str, Any]
    items: list[dict[str, Any]]


@attrs.frozen
class ConversationStoreHandle(_StoreHandle):
    async def create(self, conversation: dict[str, Any], items: Iterable[Any] = ()) -> bool:
        """Stores a new conversation (keyed by its object's id) with its first items;
        returns whether it is retained."""
        self.check_enabled()
        record = (encode_json(conversation), *(encode_json(item) for item in items))
        return await ask(self._inbox,
                         lambda reply: PutConversation(conversation["id"], record, reply))

    async def read(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation's object and items, or None; counts as a use for LRU."""
        record = await self._record(conversation_id)
        if record is None:
            return None
        return ConversationRecord(json.loads(record[0]), [json.loads(i) for i in record[1:]])

    async def get(self, conversation_id: str) -> list[Any] | None:
        """Returns a fresh copy of the transcript (the items), or None; counts as a use for
        LRU."""
        record = await self._record(conversation_id)
        return None if record is None else [json.loads(item) for item in record[1:]]

    async def append(self, conversation_id: str, items: Iterable[Any]) -> bool:
        """Appends transcript items, creating the conversation if unknown (created now, no
        metadata); returns whether it is retained (a transcript that outgrows the byte
        budget is dropped)."""
        created = encode_json(conversation_object(conversation_id, int(time.time())))
        return await self._append(conversation_id, items, created) is True

    async def extend(self, conversation_id: str, items: Iterable[Any]) -> bool | None:
        """Appends items to an existing conversation: None when there is none, else whether
        it is retained (as `append`)."""
        return await self._append(conversation_id, items, None)

    async def replace_conversation(self, conversation: dict[str, Any]) -> bool:
        """Replaces a conversation's object (keyed by its id), keeping its items and age;
        False when there is no such conversation or it no longer fits the byte budget."""
        self.check_enabled()
        cid, encoded = conversation["id"], encode_json(conversation)
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
                         lambda reply: RemoveConversationItem(conversation_id, found, reply))

    async def delete(self, conversation_id: str) -> bool:
        self.check_enabled()
        return await ask(self._inbox, lambda reply: DeleteConversation(conversation_id, reply))

    async def _record(self, conversation_id: str) -> tuple[bytes, ...] | None:
        self.check_enabled()
        return await ask(self._inbox, lambda reply: GetConversation(conversation_id, reply))

    async def _append(self, conversation_id: str, items: Iterable[Any], created: bytes | None
                      ) -> bool | None:
        self.check_enabled()
        encoded = tuple(encode_json(item) for item in items)
        return await ask(self._inbox, lambda reply: AppendConversation(
            conversation_id, encoded, created, reply))


class _BudgetedStore:
    disabled_reason: str

    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        ttl_secs: float,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._entries = BudgetedMap(
            max_entries=max_entries, max_bytes=max_bytes, ttl_secs=ttl_secs
        )
        self._clock = clock

    async def _next_message(self, inbox: trio.MemoryReceiveChannel[Any]) -> Any | None:
        """The next mailbox message; or None after sweeping, when the next entry expires
        first (so expired entries give their memory back even if nobody reads them)."""
        deadline = self._entries.next_expiry()
        with trio.move_on_at(math.inf if deadline is None else deadline):
            return await inbox.receive()
        self._entries.sweep(self._clock())
        return None

    async def _serve(self, inbox: trio.MemoryReceiveChannel[Any], handle: Callable[[Any], None]
                     ) -> None:
        while True:
            try:
                msg = await self._next_message(inbox)
            except trio.EndOfChannel:
                return
            if msg is not None:
                handle(msg)

    @property
    def _disabled(self) -> str | None:
        return self.disabled_reason if self._entries.max_entries == 0 else None


class ResponseStore(_BudgetedStore):
    disabled_reason = "response storage is disabled (--responses-store-max-entries is 0)"

    def __init__(self, *, ephemeral_ttl_secs: float = 600, **budgets: Any) -> None:
        super().__init__(**budgets)
        self._entries = BudgetedMap(max_entries=self._entries.max_entries,
                                    max_bytes=self._entries.max_bytes,
                                    ttl_secs=self._entries.ttl_secs, on_remove=self._forget)
        self._ephemeral_ttl = ephemeral_ttl_secs
        # The item index, kept in step with the entries: item id → response id, and back.
        self._item_owner: dict[str, str] = {}
        self._items_of: dict[str, tuple[str, ...]] = {}

    def _forget(self, response_id: Hashable) -> None:
        for item_id in self._items_of.pop(str(response_id), ()):
            if self._item_owner.get(item_id) == response_id:
                del self._item_owner[item_id]

    def _put(self, msg: PutResponse, now: float) -> bool:
        kept = self._entries.put(msg.response_id, msg.stored, now, pinned=msg.pinned,
                                 size=max(msg.stored.size, msg.reserve),
                                 ttl_secs=self._ephemeral_ttl if msg.ephemeral else None)
        if kept and msg.item_ids:
            self._items_of[msg.response_id] = msg.item_ids
            self._item_owner.update(dict.fromkeys(msg.item_ids, msg.response_id))
        return kept

    def _find_item(self, item_id: str, now: float) -> StoredResponse | None:
        owner = self._item_owner.get(item_id)
        if owner is None:
            return None
        stored: StoredResponse | None = self._entries.get(owner, now)
        return stored

    async def run(
        self, *, task_status: trio.TaskStatus[ResponseStoreHandle] = trio.TASK_STATUS_IGNORED
    ) -> None:
        send, inbox = trio.open_memory_channel[ResponseStoreMessage](MAILBOX_SIZE)
        task_status.started(ResponseStoreHandle(send, self._disabled))
        await self._serve(inbox, self._handle)

    def _handle(self, msg: ResponseStoreMessage) -> None:
        entries, now = self._entries, self._clock()
        match msg:
            case PutResponse(reply=reply):
                answer(reply, lambda: self._put(msg, now))
            case FindItem(item_id, reply):
                answer(reply, lambda: self._find_item(item_id, now))
            case GetResponse(response_id, reply):
                answer(reply, lambda: entries.get(response_id, now))
            case DeleteResponse(response_id, reply):
                answer(reply, lambda: entries.delete(response_id, now))
            case PinResponse(response_id, reply):
                answer(reply, lambda: entries.pin(response_id, now))
            case UnpinResponse(response_id, reply):
                answer(reply, lambda: entries.unpin(response_id, now))
            case GetStatistics(reply):
                answer(reply, entries.statistics)


class ConversationStore(_BudgetedStore):
    """Each entry is a conversation's record, a list of compact JSON values (its object,
    then its items); its size is the length of that record as one JSON array."""

    disabled_reason = "conversation storage is disabled (--conversation-store-max-entries is 0)"

    async def run(
        self, *, task_status: trio.TaskStatus[ConversationStoreHandle] = trio.TASK_STATUS_IGNORED
    ) -> None:
        send, inbox = trio.open_memory_channel[ConversationStoreMessage](MAILBOX_SIZE)
        task_status.started(ConversationStoreHandle(send, self._disabled))
        await self._serve(inbox, self._handle)

    def _handle(self, msg: ConversationStoreMessage) -> None:
        entries, now = self._entries, self._clock()
        match msg:
            case PutConversation(conversation_id, record, reply):
                size = _array_bytes(record)
                answer(reply, lambda: entries.put(conversation_id, list(record), now, size=size))
            case GetConversation(conversation_id, reply):
                answer(reply, lambda: _snapshot(entries.get(conversation_id, now)))
            case AppendConversation(reply=reply):
                answer(reply, lambda: self._append(msg, now))
            case ReplaceConversationObject(conversation_id, conversation, reply):
                answer(reply, lambda: self._replace_object(conversation_id, conversation, now))
            case RemoveConversationItem(conversation_id, item, reply):
                answer(reply, lambda: self._remove_item(conversation_id, item, now))
            case DeleteConversation(conversation_id, reply):
                answer(reply, lambda: entries.delete(conversation_id, now))
            case GetStatistics(reply):
                answer(reply, entries.statistics)

    def _append(self, msg: AppendConversation, now: float) -> bool | None:
        size = sum(len(item) for item in msg.items)
        if self._entries.get(msg.conversation_id, now) is not None:
            return self._entries.append(msg.conversation_id, msg.items, now, size=size)
        if msg.created is None:
            return None
        return self._entries.append(msg.conversation_id, (msg.created, *msg.items), now,
                                    size=len(msg.created) + size)

    def _replace_object(self, conversation_id: str, conversation: bytes, now: float) -> bool:
        record: list[bytes] | None = self._entries.get(conversation_id, now)
        if record is None:
            return False
        growth = len(conversation) - len(record[0])
        record[0] = conversation
        return self._resized(conversation_id, growth, now)

    def _remove_item(self, conversation_id: str, item: bytes, now: float) -> bool:
        record: list[bytes] | None = self._entries.get(conversation_id, now)
        if record is None:
            return False
        try:
            del record[record.index(item, 1)]
        except ValueError:
            return False
        return self._resized(conversation_id, -(len(item) + len(",")), now)

    def _resized(self, conversation_id: str, growth: int, now: float) -> bool:
        """Accounts for a record changed in place by `growth` bytes (negative: it shrank),
        keeping its age, as an append of no items does; returns whether it is retained (one
        that outgrew the byte budget is dropped, as a transcript is)."""
        return self._entries.append(conversation_id, (), now, size=growth)


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

    async def remember(self, turns: Iterable[tuple[str, str]]) -> None:
        turns = tuple(turns)
        if self.enabled and turns:
            await self._inbox.send(RememberReasoning(turns))

    async def recall(self, keys: Iterable[str]) -> list[str | None]:
        keys = tuple(keys)
        if not self.enabled or not keys:
            return [None] * len(keys)
        return await ask(self._inbox, lambda reply: RecallReasoning(keys, reply))

    async def statistics(self) -> BudgetStatistics:
        return await ask(self._inbox, GetStatistics)


class ReasoningEchoStore:
    def __init__(self, *, max_bytes: int, clock: Callable[[], float] = trio.current_time):
        self._entries = BudgetedMap(max_entries=ECHO_MAX_ENTRIES if max_bytes else 0,
                                    max_bytes=max_bytes, ttl_secs=0)
        self._clock = clock

    async def run(
        self, *, task_status: trio.TaskStatus[ReasoningEchoHandle] = trio.TASK_STATUS_IGNORED
    ) -> None:
        entries = self._entries
        send, inbox = trio.open_memory_channel[ReasoningEchoMessage](MAILBOX_SIZE)
        task_status.started(ReasoningEchoHandle(send, entries.max_entries > 0))
        async for msg in inbox:
            now = self._clock()
            match msg:
                case RememberReasoning(turns):
                    for key, text in turns:
                        entries.put(key, text, now, size=len(text.encode()) + len(key))
                case RecallReasoning(keys, reply):
                    answer(reply, lambda: [entries.get(k, now) for k in keys])
                case GetStatistics(reply):
                    answer(reply, entries.statistics)
