"""Earlier turns a request continues: a `previous_response_id` chain or a conversation.

Each stored response keeps its own input items next to its object; the whole chain is the
concatenation, oldest first, of every ancestor's input and output (instructions are never
inherited: they live on the response object, not in its items).
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from ..errors import InvalidRequest
from .lifecycle import TERMINAL_STATUSES, Status
from .objects import StreamEvent, Item, ResponseError, ResponseEvent, ResponseObject


class StoredTurn(Protocol):
    """A stored response as a chain reads it (storage/records.py `StoredResponse`)."""

    @property
    def response(self) -> ResponseObject: ...

    @property
    def input(self) -> list[Item]: ...

    @property
    def ephemeral(self) -> bool: ...


class ResponseReader(Protocol):
    """Where stored responses are read from (the response store's handle)."""

    async def get(self, response_id: str) -> StoredTurn | None: ...

# A chain longer than this is refused rather than walked (each hop is one store message).
MAX_CHAIN = 10_000


USAGE_BOUND = 10 ** 15 - 1   # more tokens than any count in a usage object will reach
TOO_LARGE = ("the response is larger than --responses-store-max-bytes and could not be kept")


def too_large(obj: ResponseObject, created: StreamEvent
              ) -> tuple[ResponseObject, list[StreamEvent]]:
    """What is stored for a finished job whose final object the byte budget cannot hold:
    the object as `failed`, without output, and its events (the created one, then
    response.failed)."""
    failed = attrs.evolve(obj, status=Status.FAILED, output=[], incomplete_details=None,
                          error=ResponseError("server_error", TOO_LARGE))
    closing = ResponseEvent(type="response.failed", sequence_number=1, response=failed)
    return failed, [created, closing]


def turn_items(turn: StoredTurn) -> list[Item]:
    """One stored turn as history: its input, then its output."""
    return [*turn.input, *turn.response.output]


async def chain(responses: ResponseReader, previous_response_id: str) -> list[Item]:
    """Every earlier input and output item, oldest first, ending with the named response."""
    turns: list[list[Item]] = []
    rid: str | None = previous_response_id
    while rid is not None:
        rec = await responses.get(rid)
        if rec is None:
            if rid == previous_response_id:
                raise InvalidRequest(f"Previous response with id '{rid}' not found.",
                                     param="previous_response_id",
                                     code="previous_response_not_found")
            break  # an older ancestor expired: the chain starts where the store still has it
        check_continuable(rid, rec)
        turns.append(turn_items(rec))
        if len(turns) > MAX_CHAIN:
            raise InvalidRequest("the previous_response_id chain is too long",
                                 param="previous_response_id")
        rid = rec.response.previous_response_id
    return [item for turn in reversed(turns) for item in turn]


def check_continuable(response_id: str, rec: StoredTurn) -> None:
    status = rec.response.status.value
    if status not in TERMINAL_STATUSES:
        raise InvalidRequest(
            f"previous response '{response_id}' has not finished (status: {status})",
            param="previous_response_id")
    if rec.ephemeral:
        raise InvalidRequest(
            f"response '{response_id}' was created with store: false; it can be polled but "
            "not used as previous_response_id", param="previous_response_id")


def conversation_id(value: str | dict[str, Any]) -> str:
    cid = value.get("id") if isinstance(value, dict) else value
    if not isinstance(cid, str) or not cid:
        raise InvalidRequest("conversation must be an id string or an object with an 'id'",
                             param="conversation")
    return cid
