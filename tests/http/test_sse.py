"""Server-sent events: the framing (`event:` + `data:` + a blank line, no `[DONE]`) and the
coalescing loop that follows a live response (virtual time: trio's MockClock)."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

import trio

from triode.http import sse
from triode.model.request import Sampling
from triode.responses import translate, wire
from triode.responses.builder import ResponseBuilder
from triode.responses.convert import structure
from triode.responses.objects import (ResponseEvent, StreamEvent, TextDeltaEvent,
                                      TextDoneEvent, plain)

RESPONSE = ResponseBuilder("resp_1", translate.plan(structure(
    {"model": "m", "input": "hi"}, wire.CreateResponse), Sampling()).echo).obj


def event(kind: str, n: int, delta: str = "a") -> StreamEvent:
    """A typed event of `kind` with sequence number `n` (a text delta's `delta`)."""
    if kind.endswith(".delta"):
        return TextDeltaEvent(type=kind, sequence_number=n, item_id="msg_1", output_index=0,
                              content_index=0, delta=delta)
    if kind.endswith("_text.done"):
        return TextDoneEvent(type=kind, sequence_number=n, item_id="msg_1", output_index=0,
                             content_index=0, text=delta)
    return ResponseEvent(type=kind, sequence_number=n, response=RESPONSE)


def parsed(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of an SSE body."""
    pairs = []
    for block in body.decode().split("\n\n")[:-1]:
        head, data = block.split("\n")
        assert head.startswith("event: ") and data.startswith("data: ")
        pairs.append((head[len("event: "):], json.loads(data[len("data: "):])))
    return pairs


def test_events_are_framed_back_to_back_each_named_by_its_type():
    """Each event is `event: <type>` and its JSON on one `data:` line, ended by a blank
    line; several go in one write; nothing follows the last (no `[DONE]`)."""
    events = [event("response.output_text.delta", 3, delta="a\nb"),
              event("response.completed", 4)]
    body = sse.frames(events)
    assert parsed(body) == [(e.type, plain(e)) for e in events]
    assert body.endswith(b'}}\n\n')
    assert b"[DONE]" not in body


def test_another_stream_s_event_is_named_by_its_kind():
    """The live page's events: the kind given, the data as compact JSON."""
    assert sse.frame("figures", {"a": [1, 2]}) == b'event: figures\ndata: {"a":[1,2]}\n\n'


class Live:
    """A live response whose batches are given up front; `wait` (more has come) returns
    after `more_after` seconds, never when None."""

    response_id = "resp_1"

    def __init__(self, *batches: list[StreamEvent], more_after: float | None = None
                 ) -> None:
        self.batches = batches
        self.more_after = more_after

    async def follow_batches(self, starting_after: int = -1
                             ) -> AsyncIterator[list[StreamEvent]]:
        for batch in self.batches:
            yield batch

    async def wait(self) -> None:
        if self.more_after is None:
            await trio.sleep_forever()
        await trio.sleep(self.more_after)


async def times_of(live: Live) -> list[tuple[list[int], float]]:
    """Each batch `coalesced` yields (its sequence numbers) and when, from the start, in
    microseconds."""
    began = trio.current_time()
    return [([e.sequence_number for e in batch], round((trio.current_time() - began) * 1e6))
            async for batch in sse.coalesced(live)]


async def test_after_a_delta_the_reader_waits_a_moment_for_more(autojump_clock):
    """A batch that ends in a delta is followed by a wait of COALESCE_SECS (so the next
    write carries several steps); one that ends otherwise is not."""
    live = Live([event("response.created", 0), event("response.in_progress", 1)],
                [event("response.output_text.delta", 2)],
                [event("response.output_text.done", 3)],
                [event("response.completed", 4)])
    wait = round(sse.COALESCE_SECS * 1e6)
    assert await times_of(live) == [([0, 1], 0), ([2], 0), ([3], wait), ([4], wait)]


async def test_the_wait_after_a_delta_ends_as_soon_as_more_has_come(autojump_clock):
    """The wait is at most COALESCE_SECS: events that arrive sooner are read then."""
    soon = sse.COALESCE_SECS / 4
    live = Live([event("response.output_text.delta", 0)],
                [event("response.output_text.delta", 1)],
                [event("response.completed", 2)], more_after=soon)
    us = round(soon * 1e6)
    assert await times_of(live) == [([0], 0), ([1], us), ([2], 2 * us)]
