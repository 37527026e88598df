"""The records the stores keep, as they cross the store actors' mailboxes: compact JSON
bytes, encoded and decoded by the handles in the caller's task."""

from __future__ import annotations

from typing import Any, Iterable

import attrs

from ..responses.objects import dumps


def encode_json(obj: Any) -> bytes:
    """JSON of typed answers (responses/objects.py) or JSON-shaped data, by the one
    converter."""
    return dumps(obj).encode()


@attrs.frozen
class StoredResponse:
    """A stored response as kept: its record's JSON and its events' JSON array."""

    body: bytes
    events: bytes

    @classmethod
    def of(cls, response: Any, events: Iterable[Any] = ()) -> "StoredResponse":
        return cls(encode_json(response), encode_json(list(events)))

    @property
    def size(self) -> int:
        """The bytes it counts against the store's budget."""
        return len(self.body) + len(self.events)
