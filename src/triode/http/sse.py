"""Server-sent events framing: `event: <type>` + `data: <json>`, no `[DONE]` terminator."""

from __future__ import annotations

import json
from typing import Any


def frame(event: dict[str, Any]) -> bytes:
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
