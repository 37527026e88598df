"""The records the stores keep, typed at their edge.

A record crosses the store actors' mailboxes as compact JSON bytes, encoded and decoded by
the handles in the caller's task: retained memory stays close to the byte budget, callers get
fresh objects that cannot alias the store's state, and every entry's size is exact (the
length of what is kept).

`StoredResponse` is one stored response: its object, its canonical input items, whether it is
ephemeral (a background job with store: false: polled, never continued), and its stream
events. It keeps the two values a store entry holds, exactly as they are stored (the
record's JSON, `{"response": ..., "input": [...]}` with `"ephemeral": true` when it is, and
the JSON array of its events), and decodes each only when a typed attribute is read: a
replay copies the event log, a chain reads the object and items.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Iterable, Sequence

import attrs

from ..responses.conversations import ConversationObject
from ..responses.objects import (Item, ResponseObject, StreamEvent, dumps, event_of, item_of,
                                 items_of, plain, response_of)


def encode_json(obj: Any) -> bytes:
    """JSON of typed answers (responses/objects.py) or JSON-shaped data, by the one
    converter."""
    return dumps(obj).encode()


@attrs.frozen
class StoredResponse:
    """A stored response as kept: its record's JSON (`body`) and its events' JSON array
    (`event_log`); the typed attributes decode them on first read."""

    body: bytes
    event_log: bytes = b"[]"

    @classmethod
    def of(cls, response: ResponseObject, items: Sequence[Item],
           events: Iterable[StreamEvent] = (), *, ephemeral: bool = False) -> "StoredResponse":
        """The record of a response, its input items and its events."""
        return cls(encode_json(_record(response, items, ephemeral)),
                   encode_json(list(events)))

    @property
    def size(self) -> int:
        """The bytes it counts against the store's budget."""
        return len(self.body) + len(self.event_log)

    @functools.cached_property
    def _json(self) -> Any:
        return json.loads(self.body)

    @functools.cached_property
    def response(self) -> ResponseObject:
        return response_of(self._json["response"])

    @functools.cached_property
    def input(self) -> list[Item]:
        """Its canonical input items (a chain's history: these, then the output)."""
        return items_of(self._json["input"])

    @property
    def ephemeral(self) -> bool:
        return bool(self._json.get("ephemeral"))

    def events(self) -> list[StreamEvent]:
        """Its stream events, decoded and typed (fresh each call)."""
        return [event_of(event) for event in json.loads(self.event_log)]

    def with_response(self, response: ResponseObject) -> "StoredResponse":
        """The same record (input, ephemeral, events) with another object."""
        return attrs.evolve(self, body=encode_json({**self._json, "response": plain(response)}))

    def with_events(self, events: Iterable[StreamEvent]) -> "StoredResponse":
        return attrs.evolve(self, event_log=encode_json(list(events)))

    def item_ids(self) -> tuple[str, ...]:
        """The ids of its input and output items (the store's index, for item_reference)."""
        return tuple(item["id"] for item in self._item_json() if isinstance(item.get("id"), str))

    def find_item(self, item_id: str) -> Item | None:
        """Its input or output item with this id, if any."""
        found = next((item for item in self._item_json() if item.get("id") == item_id), None)
        return None if found is None else item_of(found)

    def _item_json(self) -> list[Any]:
        record = self._json
        return [*record.get("input", ()), *record.get("response", {}).get("output", ())]


@attrs.frozen
class ConversationRecord:
    """A conversation as read: its object and its items (fresh copies). It is kept as a
    list of compact JSON values: its object first
    (`responses.conversations.conversation_object`), then its items."""

    conversation: ConversationObject
    items: list[Item]

    @classmethod
    def decode(cls, values: Sequence[bytes]) -> "ConversationRecord":
        return cls(json.loads(values[0]), decode_items(values[1:]))


def decode_items(values: Iterable[bytes]) -> list[Item]:
    """Kept items (a conversation's), typed."""
    return [item_of(json.loads(value)) for value in values]


def _record(response: ResponseObject, items: Sequence[Item], ephemeral: bool
            ) -> dict[str, Any]:
    """The JSON a stored response's record is kept as (the format of every existing store)."""
    record: dict[str, Any] = {"response": plain(response), "input": plain(list(items))}
    if ephemeral:
        record["ephemeral"] = True
    return record
