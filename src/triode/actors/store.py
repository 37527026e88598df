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
from typing import Any, Callable, Iterable

import attrs
import trio

from ..errors import StoreDisabled
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
    reply: ReplyChannel[bool]


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
    | GetStatistics
)


# The conversation store's mailbox.


@attrs.frozen
class GetConversation:
    conversation_id: str
    reply: ReplyChannel["tuple[bytes, ...] | None"]


@attrs.frozen
class AppendConversation:
    conversation_id: str
    items: tuple[bytes, ...]
    reply: ReplyChannel[bool]


@attrs.frozen
class DeleteConversation:
    conversation_id: str
    reply: ReplyChannel[bool]


ConversationStoreMessage = (
    GetConversation | AppendConversation | DeleteConversation | GetStatistics
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
        return await ask(
            self._inbox,
            lambda reply: PutResponse(response_id, stored, pinned, ephemeral, reserve, reply),
        )

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
class ConversationStoreHandle(_StoreHandle):
    async def get(self, conversation_id: str) -> list[Any] | None:
        """Returns a fresh copy of the transcript, or None; counts as a use for LRU."""
        self.check_enabled()
        items: tuple[bytes, ...] | None = await ask(
            self._inbox, lambda reply: GetConversation(conversation_id, reply))
        return None if items is None else [json.loads(item) for item in items]

    async def append(self, conversation_id: str, items: Iterable[Any]) -> bool:
        """Appends transcript items, creating the conversation if unknown; returns whether
        it is retained (a transcript that outgrows the byte budget is dropped)."""
        self.check_enabled()
        encoded = tuple(encode_json(item) for item in items)
        return await ask(
            self._inbox, lambda reply: AppendConversation(conversation_id, encoded, reply)
        )

    async def delete(self, conversation_id: str) -> bool:
        self.check_enabled()
        return await ask(self._inbox, lambda reply: DeleteConversation(conversation_id, reply))


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
        self._ephemeral_ttl = ephemeral_ttl_secs

    async def run(
        self, *, task_status: trio.TaskStatus[ResponseStoreHandle] = trio.TASK_STATUS_IGNORED
    ) -> None:
        send, inbox = trio.open_memory_channel[ResponseStoreMessage](MAILBOX_SIZE)
        task_status.started(ResponseStoreHandle(send, self._disabled))
        await self._serve(inbox, self._handle)

    def _handle(self, msg: ResponseStoreMessage) -> None:
        entries, now = self._entries, self._clock()
        match msg:
            case PutResponse(response_id, stored, pinned, ephemeral, reserve, reply):
                size = max(stored.size, reserve)
                ttl = self._ephemeral_ttl if ephemeral else None
                answer(reply, lambda: entries.put(response_id, stored, now, pinned=pinned,
                                                  size=size, ttl_secs=ttl))
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
            case GetConversation(conversation_id, reply):
                answer(reply, lambda: _snapshot(entries.get(conversation_id, now)))
            case AppendConversation(conversation_id, items, reply):
                size = sum(len(item) for item in items)
                answer(reply, lambda: entries.append(conversation_id, items, now, size=size))
            case DeleteConversation(conversation_id, reply):
                answer(reply, lambda: entries.delete(conversation_id, now))
            case GetStatistics(reply):
                answer(reply, entries.statistics)


def _snapshot(items: list[bytes] | None) -> tuple[bytes, ...] | None:
    """A tuple copy, so later appends never show through a transcript already handed out."""
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
