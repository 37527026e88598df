"""What a response leaves behind: written at its end, read back, deleted.

`ResponseKeeper.keep` is the supervisors' keeper: every response's end is handed to it
before anyone is told of it (the store write, the conversation append, the reasoning echo),
retried while a shared store is down. `LocalResponses` is one WebSocket connection's own
memory of its responses, and `LocalKeeper` the keeper of the responses made there.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from typing import Any

import attrs
import trio

from ..errors import NotFound, StoreDisabled, StoreUnavailable
from ..responses import history
from ..responses.items import chat_messages, turn_keys
from ..responses.lifecycle import FINISHED_STATUSES
from ..responses.objects import Item, ResponseObject, StreamEvent, plain
from ..responses.translate import Plan
from ..storage.records import StoredResponse
from .stores import Stores

log = logging.getLogger(__name__)

# A response finished while its shared store is down: how long `keep` retries (the
# supervisor gives it at most TERMINAL_HOOK_TIMEOUT, 5 s).
KEEP_RETRY_SECS = 4.0
KEEP_RETRY_INTERVAL = 0.5
LOCAL_RESPONSES = 64   # responses one connection remembers (LRU) for previous_response_id


class ResponseKeeper:
    """What one caller's responses leave behind: made per call over the caller's view of
    the stores (`Stores.of`), so it writes and reads that tenant's names only."""

    def __init__(self, stores: Stores):
        self._responses = stores.responses
        self._conversations = stores.conversations
        self._reasoning = stores.reasoning

    async def check_reachable(self, plan: Plan, *, background: bool) -> None:
        """A shared store that a turn's end writes to and that is down now: 503 before any
        work."""
        if plan.store or background:
            await self._responses.ping()
        if plan.conversation is not None:
            await self._conversations.ping()

    # ---- a response's end (the supervisor's Keeper) --------------------------------------

    async def keep(self, plan: Plan, obj: ResponseObject, events: list[StreamEvent]
                   ) -> None:
        """At a response's end: store it (see `_keep`). A shared store that went down since
        the create was accepted is retried for KEEP_RETRY_SECS, then the loss is logged."""
        deadline = trio.current_time() + KEEP_RETRY_SECS
        while True:
            try:
                await self._keep(plan, obj, events)
                return
            except StoreUnavailable as exc:
                if trio.current_time() >= deadline:
                    log.error("response %s was not stored: %s", obj.id, exc.message)
                    return
                log.warning("response %s: store unavailable, retrying: %s", obj.id,
                            exc.message)
                await trio.sleep(KEEP_RETRY_INTERVAL)

    async def _keep(self, plan: Plan, obj: ResponseObject, events: list[StreamEvent]
                    ) -> None:
        """Store it (store: true, or any background job, whose final object replaces its
        pinned entry); then, if it finished, extend its conversation, if any, and remember
        the reasoning of the turn it returned."""
        if obj.background:
            obj = await self._keep_job(plan, obj, events)
        elif plan.store:
            with contextlib.suppress(StoreDisabled):
                await self._responses.put(obj.id, StoredResponse.of(obj, plan.items, events))
        if obj.status not in FINISHED_STATUSES:
            return  # a failed or cancelled turn adds nothing
        turn = [*plan.messages, *chat_messages(None, obj.output)]
        await self._reasoning.remember((key, m["reasoning_content"])
                                  for m, key in zip(turn, turn_keys(turn))
                                  if key is not None and m.get("reasoning_content"))
        if plan.conversation is not None:
            with contextlib.suppress(StoreDisabled):
                await self._conversations.append(plan.conversation,
                                                 [*plan.items, *obj.output])

    async def _keep_job(self, plan: Plan, obj: ResponseObject, events: list[StreamEvent]
                        ) -> ResponseObject:
        """A finished job's final object becomes a stored response (store: false: readable
        for the ephemeral TTL only), replacing its pinned entry. One too big for the byte
        budget is replaced by a `failed` response with empty output, so polling still gets
        an answer; the pinned entry reserved room for that one (`Jobs.start`), so it is
        always kept. Returns the object as kept."""
        ephemeral = not plan.store
        stored = StoredResponse.of(obj, plan.items, events, ephemeral=ephemeral)
        if await self._responses.put(obj.id, stored, ephemeral=ephemeral):
            return obj
        failed, kept_events = history.too_large(obj, events[0])
        await self._responses.put(
            obj.id, StoredResponse.of(failed, plan.items, kept_events, ephemeral=ephemeral),
            ephemeral=ephemeral)
        return failed

    # ---- reading and deleting what was kept ------------------------------------------------

    def check_enabled(self) -> None:
        """StoreDisabled (a 4xx) when response storage is configured off."""
        self._responses.check_enabled()

    async def stored(self, response_id: str) -> StoredResponse:
        """A stored response; 404 when there is none."""
        rec = await self._responses.get(response_id)
        if rec is None:
            raise NotFound(f"No response found with id '{response_id}'.",
                           param="response_id")
        return rec

    async def stored_events(self, response_id: str, starting_after: int
                            ) -> list[StreamEvent]:
        """A stored response's stream events after `starting_after`; 404 when none."""
        events = (await self.stored(response_id)).events()
        return [e for e in events if e.sequence_number > starting_after]

    async def input_items(self, response_id: str) -> list[dict[str, Any]]:
        """A stored response's input items, as the API lists them."""
        items: list[dict[str, Any]] = plain((await self.stored(response_id)).input)
        return items

    async def delete(self, response_id: str) -> None:
        """Deletes a stored response; 404 when there is none."""
        if not await self._responses.delete(response_id):
            raise NotFound(f"No response found with id '{response_id}'.",
                           param="response_id")


class LocalResponses:
    """One connection's own responses, as OpenAI's WebSocket mode keeps them: the `store:
    false` responses and warm-ups made on a socket can be named as `previous_response_id` by
    later creates on that socket (Codex sends `store: false` and continues each turn from the
    previous one). Each is remembered as its whole history (every earlier item, its input,
    its output); at most LOCAL_RESPONSES, least recently used first out. Owned by the
    connection's handler, which hands it to `Turns.create`/`warm`; only the turn service
    reads and writes it."""

    def __init__(self, limit: int = LOCAL_RESPONSES) -> None:
        self._limit = limit
        self._histories: OrderedDict[str, list[Item]] = OrderedDict()

    def history(self, response_id: str) -> list[Item] | None:
        found = self._histories.get(response_id)
        if found is None:
            return None
        self._histories.move_to_end(response_id)
        return list(found)

    def remember(self, response_id: str, items: list[Item]) -> None:
        self._histories[response_id] = items
        self._histories.move_to_end(response_id)
        while len(self._histories) > self._limit:
            self._histories.popitem(last=False)

    def forget(self, response_id: str) -> None:
        """Evicts one (a continuation of it failed: Open Responses' WebSocket rule); an id
        it does not hold is no error."""
        self._histories.pop(response_id, None)


@attrs.frozen
class LocalKeeper:
    """The keeper of a response made on a connection with local responses: the response
    keeper's `keep`, then a finished `store: false` response joins the connection's."""

    keeper: ResponseKeeper
    local: LocalResponses

    async def keep(self, plan: Plan, obj: ResponseObject, events: list[StreamEvent]
                   ) -> None:
        await self.keeper.keep(plan, obj, events)
        if obj.store is False and obj.status in FINISHED_STATUSES:
            self.local.remember(obj.id, [*plan.past, *plan.items, *obj.output])
