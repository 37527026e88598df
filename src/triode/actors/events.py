"""Builds one response object and the typed stream events that describe it (pure, no trio).

The builder is the single source of both: the stream's events and the final object come from
the same calls, so ids and item order are identical in both by construction.
"""

from __future__ import annotations

import copy
import secrets
import time
from typing import Any

from .lifecycle import Status


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def usage(input_tokens: int = 0, output_tokens: int = 0, cached_tokens: int = 0,
          reasoning_tokens: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


class ResponseBuilder:
    def __init__(self, response_id: str, echo: dict[str, Any], *, background: bool = False,
                 created_at: int | None = None):
        self.obj: dict[str, Any] = {
            "id": response_id,
            "object": "response",
            "created_at": created_at if created_at is not None else int(time.time()),
            "status": Status.QUEUED.value,
            "error": None,
            "incomplete_details": None,
            "output": [],
            "usage": None,
            **echo,
        }
        if background:
            self.obj["background"] = True
        self.events: list[dict[str, Any]] = []
        self._message: dict[str, Any] | None = None   # the open message item, if any

    # ---- events --------------------------------------------------------------------------

    def _emit(self, type_: str, **payload: Any) -> dict[str, Any]:
        event = {"type": type_, "sequence_number": len(self.events), **payload}
        self.events.append(event)
        return event

    def _snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.obj)

    def created(self) -> None:
        self._emit("response.created", response=self._snapshot())

    def in_progress(self) -> None:
        self.obj["status"] = Status.IN_PROGRESS.value
        self._emit("response.in_progress", response=self._snapshot())

    def text(self, delta: str) -> None:
        if not delta:
            return
        if self._message is None:
            self._open_message()
        item = self._message
        part = item["content"][0]
        part["text"] += delta
        self._emit("response.output_text.delta", item_id=item["id"],
                   output_index=self._index(item), content_index=0, delta=delta, logprobs=[])

    def _index(self, item: dict[str, Any]) -> int:
        return next(i for i, it in enumerate(self.obj["output"]) if it is item)

    def _open_message(self) -> None:
        item = {"id": new_id("msg"), "type": "message", "role": "assistant",
                "status": "in_progress", "content": []}
        self.obj["output"].append(item)
        self._message = item
        index = self._index(item)
        self._emit("response.output_item.added", output_index=index, item=copy.deepcopy(item))
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        item["content"].append(part)
        self._emit("response.content_part.added", item_id=item["id"], output_index=index,
                   content_index=0, part=copy.deepcopy(part))

    def _close_message(self, status: str) -> None:
        item, self._message = self._message, None
        if item is None:
            return
        index = self._index(item)
        part = item["content"][0]
        self._emit("response.output_text.done", item_id=item["id"], output_index=index,
                   content_index=0, text=part["text"], logprobs=[])
        self._emit("response.content_part.done", item_id=item["id"], output_index=index,
                   content_index=0, part=copy.deepcopy(part))
        item["status"] = status
        self._emit("response.output_item.done", output_index=index, item=copy.deepcopy(item))

    # ---- terminal states -----------------------------------------------------------------

    def finish(self, status: Status, usage_: dict[str, Any]) -> None:
        """completed, or incomplete because the token limit stopped generation."""
        self._close_message("completed" if status is Status.COMPLETED else "incomplete")
        self.obj["status"] = status.value
        self.obj["usage"] = usage_
        if status is Status.INCOMPLETE:
            self.obj["incomplete_details"] = {"reason": "max_output_tokens"}
        kind = "response.completed" if status is Status.COMPLETED else "response.incomplete"
        self._emit(kind, response=self._snapshot())

    def fail(self, code: str, message: str, usage_: dict[str, Any] | None = None) -> None:
        self._close_message("incomplete")
        self.obj["status"] = Status.FAILED.value
        self.obj["error"] = {"code": code, "message": message}
        self.obj["usage"] = usage_
        self._emit("response.failed", response=self._snapshot())

    def cancel(self, usage_: dict[str, Any] | None = None) -> None:
        """No event: OpenAI's stream has none for cancellation; the object records it."""
        if self._message is not None:
            self._message["status"] = "incomplete"
            self._message = None
        self.obj["status"] = Status.CANCELLED.value
        self.obj["usage"] = usage_
