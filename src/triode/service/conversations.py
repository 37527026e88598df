"""The Conversations API: named methods over the conversation store.

The store actor owns every conversation (object and items, under the store's budgets); this
service validates requests, makes ids and pages lists. A conversation the API creates is the
same record `POST /v1/responses` reads and extends with `conversation: id`, and a transcript
a response created under any id is readable here.

Like `Turns`, it holds no state of its own and is one for the process: each call names its
`Caller`, whose conversations it reads and writes. Every method first checks that the store is
enabled, so a disabled store answers every route with the same 400 whatever else is wrong.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import attrs

from ..actors.store import ConversationStoreHandle
from ..storage.records import ConversationRecord
from ..errors import NotFound
from ..responses.conversations import (ConversationDeleted, ConversationObject,
                                       ConversationUpdate,
                                       NewConversation, NewItems, Paging, check_include,
                                       conversation_object, deleted_object, item_list,
                                       new_items, page)
from ..responses.translate import check_metadata
from ..responses.ids import new_id
from ..responses.objects import plain
from ..tenants import Caller


class Conversations:
    def __init__(self, store: ConversationStoreHandle, *,
                 clock: Callable[[], float] = time.time):
        """`store`: every tenant's (each call's `caller` picks its own names).
        `clock`: wall-clock seconds, for `created_at`."""
        self._store = store
        self._clock = clock

    def _of(self, caller: Caller) -> ConversationStoreHandle:
        store = attrs.evolve(self._store, scope=caller.scope)
        store.check_enabled()
        return store

    async def create(self, caller: Caller, req: NewConversation) -> ConversationObject:
        """A new conversation with its first items (at most 20); returns its object."""
        store = self._of(caller)
        metadata = check_metadata(req.metadata)
        items = new_items(req.items or [])
        conversation = conversation_object(new_id("conv"), int(self._clock()), metadata)
        await store.create(conversation, items)
        return conversation

    async def retrieve(self, caller: Caller, conversation_id: str) -> ConversationObject:
        store = self._of(caller)
        return (await _read(store, conversation_id)).conversation

    async def update(self, caller: Caller, conversation_id: str, req: ConversationUpdate
                     ) -> ConversationObject:
        """Replaces the conversation's metadata; returns its object."""
        store = self._of(caller)
        metadata = check_metadata(req.metadata)
        conversation = (await _read(store, conversation_id)).conversation
        conversation["metadata"] = metadata   # a fresh copy: the store keeps its own JSON
        await store.replace_conversation(conversation)
        return conversation

    async def delete(self, caller: Caller, conversation_id: str) -> ConversationDeleted:
        store = self._of(caller)
        if not await store.delete(conversation_id):
            raise _no_conversation(conversation_id)
        return deleted_object(conversation_id)

    async def list_items(self, caller: Caller, conversation_id: str, *,
                         after: str | None = None, limit: str | None = None,
                         order: str | None = None, include: list[str] | None = None
                         ) -> dict[str, Any]:
        """One page of the conversation's items; the query values as given (None: absent)."""
        store = self._of(caller)
        paging = Paging.parse(after=after, limit=limit, order=order)
        check_include(include or [])
        return page(plain((await _read(store, conversation_id)).items), paging)

    async def add_items(self, caller: Caller, conversation_id: str, req: NewItems,
                        include: list[str] | None = None) -> dict[str, Any]:
        """Appends items (at most 20) to the conversation; returns them as a list object."""
        store = self._of(caller)
        check_include(include or [])
        items = new_items(req.items)
        if await store.extend(conversation_id, items) is None:
            raise _no_conversation(conversation_id)
        return item_list(plain(items))

    async def item(self, caller: Caller, conversation_id: str, item_id: str,
                   include: list[str] | None = None) -> dict[str, Any]:
        store = self._of(caller)
        check_include(include or [])
        found = next((item for item in (await _read(store, conversation_id)).items
                      if getattr(item, "id", None) == item_id), None)
        if found is None:
            raise _no_item(conversation_id, item_id)
        shown: dict[str, Any] = plain(found)
        return shown

    async def delete_item(self, caller: Caller, conversation_id: str, item_id: str
                          ) -> ConversationObject:
        """Removes one item; returns the conversation's object."""
        store = self._of(caller)
        conversation = (await _read(store, conversation_id)).conversation
        if not await store.remove_item(conversation_id, item_id):
            raise _no_item(conversation_id, item_id)
        return conversation


async def _read(store: ConversationStoreHandle, conversation_id: str) -> ConversationRecord:
    record = await store.read(conversation_id)
    if record is None:
        raise _no_conversation(conversation_id)
    return record


def _no_conversation(conversation_id: str) -> NotFound:
    return NotFound(f"Conversation with id '{conversation_id}' not found.",
                    param="conversation_id")


def _no_item(conversation_id: str, item_id: str) -> NotFound:
    return NotFound(f"Item with id '{item_id}' not found in conversation "
                    f"'{conversation_id}'.", param="item_id")
