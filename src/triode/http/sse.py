"""Streaming a response's events: server-sent events framing (`event: <type>` + `data:
<json>`, no `[DONE]` terminator) and the one coalescing loop both the SSE stream and the
WebSocket follow a live response with."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Sequence

import trio

from ..responses.objects import StreamEvent, dumps
from ..service.background import LiveResponse

# While tokens stream, a reader wakes at most this often (or at the end), so under load a
# write carries several steps' deltas instead of one send per step each.
COALESCE_SECS = 0.01


def frames(events: Sequence[StreamEvent]) -> bytes:
    """Several events framed back to back, for one write."""
    return "".join([f"event: {e.type}\ndata: {dumps(e)}\n\n" for e in events]).encode()


def frame(kind: str, data: Any) -> bytes:
    """One event of another stream than a response's (the live page's), its data as JSON."""
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def coalesced(handle: LiveResponse, starting_after: int = -1
                    ) -> AsyncIterator[Sequence[StreamEvent]]:
    """A live response's events after `starting_after`, in batches: every event ready at a
    wake-up in one batch (one write), and after a batch that ends in a delta, a wait of up
    to COALESCE_SECS for more (the end is sent at once)."""
    async for batch in handle.follow_batches(starting_after):
        yield batch
        if batch[-1].type.endswith(".delta"):
            with trio.move_on_after(COALESCE_SECS):
                await handle.wait()


HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
