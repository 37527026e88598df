"""Server-sent events framing: `event: <type>` + `data: <json>`, no `[DONE]` terminator."""

from __future__ import annotations

import json
from typing import Any


# One encoder for every frame: json.dumps with non-default options builds a new one per call.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {_encode(event)}\n\n".encode()


def frames(events: list[dict[str, Any]]) -> bytes:
    """Several events framed back to back, for one write."""
    return "".join([f"event: {e['type']}\ndata: {_encode(e)}\n\n" for e in events]).encode()


HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
