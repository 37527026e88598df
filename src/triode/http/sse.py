"""Server-sent events framing: `event: <type>` + `data: <json>`, no `[DONE]` terminator."""

from __future__ import annotations

from typing import Sequence

from ..responses.objects import AnyEvent, dumps, event_type


def frames(events: Sequence[AnyEvent]) -> bytes:
    """Several events framed back to back, for one write."""
    return "".join([f"event: {event_type(e)}\ndata: {dumps(e)}\n\n" for e in events]).encode()


HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
