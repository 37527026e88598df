"""The Conversations API as pure code: its request bodies, the conversation object, the
metadata limits and one page of a list of items.

A conversation is its object (`{"id", "object": "conversation", "created_at", "metadata"}`)
and its items, the canonical items history replays (`items.canonical`), each with an id; the
store keeps their JSON, which the reads here page through as it is.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

import attrs

from ..errors import InvalidRequest
from . import wire
from .items import canonical
from .objects import Item
from .translate import INCLUDES, check_metadata

# Items one create or items.create call may add (OpenAI's limit).
MAX_ITEMS_PER_CALL = 20
LIST_LIMIT_DEFAULT = 20
LIST_LIMIT_MAX = 100


# ---- request bodies (structured by the one converter, `convert.structure`) ----------------

@attrs.frozen(kw_only=True)
class NewConversation:
    """`POST /v1/conversations`."""

    items: list[wire.InputItem] | None = None
    metadata: dict[str, str] | None = None
    safety_identifier: str | None = None   # openai-python sends it; no effect here


@attrs.frozen(kw_only=True)
class ConversationUpdate:
    """`POST /v1/conversations/{id}`: the metadata replaces the old one (null clears it)."""

    metadata: dict[str, str] | None


@attrs.frozen(kw_only=True)
class NewItems:
    """`POST /v1/conversations/{id}/items`."""

    items: list[wire.InputItem]


# ---- objects --------------------------------------------------------------------------------

class ConversationObject(TypedDict):
    id: str
    object: Literal["conversation"]
    created_at: int
    metadata: dict[str, str]


class ConversationDeleted(TypedDict):
    id: str
    object: Literal["conversation.deleted"]
    deleted: Literal[True]


class ItemPage(TypedDict):
    """One page of a list of items (`page`), or the items one call added (`item_list`)."""

    object: Literal["list"]
    data: list[Item]
    first_id: str | None
    last_id: str | None
    has_more: bool


def conversation_object(conversation_id: str, created_at: int,
                        metadata: dict[str, str] | None = None) -> ConversationObject:
    """A conversation's object (a TypedDict: the store keeps it as its JSON)."""
    return {"id": conversation_id, "object": "conversation", "created_at": created_at,
            "metadata": dict(metadata or {})}


def deleted_object(conversation_id: str) -> ConversationDeleted:
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


# ---- validation -----------------------------------------------------------------------------

def new_items(items: list[wire.InputItem]) -> list[Item]:
    """Request items as canonical items with ids; at most MAX_ITEMS_PER_CALL. An
    `item_reference` is refused: a conversation keeps items, not pointers to them."""
    if len(items) > MAX_ITEMS_PER_CALL:
        raise InvalidRequest(f"Invalid 'items': at most {MAX_ITEMS_PER_CALL} items at a time, "
                             f"got {len(items)}", param="items")
    for i, item in enumerate(items):
        if isinstance(item, wire.ItemReference):
            raise InvalidRequest("an item_reference cannot be added to a conversation; send "
                                 "the item itself", param=f"items[{i}]")
    return [canonical(item, f"items[{i}]") for i, item in enumerate(items)]


def check_include(include: list[str]) -> None:
    """`include` is accepted (items are returned whole); an unknown value is a 400."""
    for i, value in enumerate(include):
        if value not in INCLUDES:
            raise InvalidRequest(f"Invalid value for 'include[{i}]': {value!r}; expected one "
                                 f"of {', '.join(INCLUDES)}", param="include")


# ---- paging ---------------------------------------------------------------------------------

@attrs.frozen
class Paging:
    """One page's request: the items after `after` (an item id) in `order`, `limit` of them."""

    after: str | None = None
    limit: int = LIST_LIMIT_DEFAULT
    order: Literal["asc", "desc"] = "desc"

    @classmethod
    def parse(cls, *, after: str | None, limit: str | None, order: str | None) -> Paging:
        """From query-string values (None: not given); a bad one is a 400 naming it."""
        n = LIST_LIMIT_DEFAULT
        if limit is not None:
            try:
                n = int(limit)
            except ValueError:
                raise InvalidRequest("Invalid value for 'limit': expected an integer",
                                     param="limit") from None
            if not 1 <= n <= LIST_LIMIT_MAX:
                raise InvalidRequest(f"Invalid value for 'limit': must be between 1 and "
                                     f"{LIST_LIMIT_MAX}", param="limit")
        if order == "asc":
            return cls(after, n, "asc")
        if order in (None, "desc"):
            return cls(after, n, "desc")
        raise InvalidRequest("Invalid value for 'order': expected 'asc' or 'desc'",
                             param="order")


def page(items: list[dict[str, Any]], paging: Paging, *, owner: str = "conversation"
         ) -> dict[str, Any]:
    """OpenAI's list object (an `ItemPage`) for one page of `items` (kept in ascending order); an `after`
    that names no item is a 400 naming it."""
    ordered = items if paging.order == "asc" else items[::-1]
    if paging.after is not None:
        ids = [item.get("id") for item in ordered]
        if paging.after not in ids:
            raise InvalidRequest(f"No item with id '{paging.after}' in this {owner}.",
                                 param="after")
        ordered = ordered[ids.index(paging.after) + 1:]
    data = ordered[:paging.limit]
    return {"object": "list", "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(ordered) > paging.limit}


def item_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The list object (an `ItemPage`) items.create answers with: every item it added, in
    order."""
    return {"object": "list", "data": items,
            "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None,
            "has_more": False}
