"""Builds one response object and the typed stream events that describe it (pure, no trio).

The builder is the single source of both: the stream's events and the final object come from
the same calls, so ids and item order are identical in both by construction.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from .ids import Usage, new_id, usage
from .lifecycle import Status
from .objects import Echo


class ResponseBuilder:
    def __init__(self, response_id: str, echo: Echo, *, background: bool = False,
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
            self.obj["usage"] = usage()   # all 0 until the job ends
        self.events: list[dict[str, Any]] = []
        self._message: dict[str, Any] | None = None     # the open message item, if any
        self._reasoning: dict[str, Any] | None = None   # the open reasoning item, if any
        self._calls: dict[int, dict[str, Any]] = {}     # open tool calls by parser index
        self._positions: dict[str, int] = {}             # item id → output_index

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

    def text(self, delta: str, logprobs: list[dict[str, Any]] | None = None) -> None:
        if not delta:
            return
        item = self._message if self._message is not None else self._open_message()
        part = item["content"][0]
        part["text"] += delta
        part["logprobs"] += logprobs or []
        self._emit("response.output_text.delta", item_id=item["id"],
                   output_index=self._index(item), content_index=0, delta=delta,
                   logprobs=logprobs or [])

    def _index(self, item: dict[str, Any]) -> int:
        # Output only grows, so an item's index is fixed when it is added (no scan per delta).
        return self._positions[item["id"]]

    def _open_message(self) -> dict[str, Any]:
        item: dict[str, Any] = {"id": new_id("msg"), "type": "message", "role": "assistant",
                                "status": "in_progress", "content": []}
        self._message = item
        index = self._add(item)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        item["content"].append(part)
        self._emit("response.content_part.added", item_id=item["id"], output_index=index,
                   content_index=0, part=copy.deepcopy(part))
        return item

    def _close_message(self, status: str) -> None:
        item, self._message = self._message, None
        if item is None:
            return
        index = self._index(item)
        part = item["content"][0]
        self._emit("response.output_text.done", item_id=item["id"], output_index=index,
                   content_index=0, text=part["text"], logprobs=part["logprobs"])
        self._emit("response.content_part.done", item_id=item["id"], output_index=index,
                   content_index=0, part=copy.deepcopy(part))
        item["status"] = status
        self._emit("response.output_item.done", output_index=index, item=copy.deepcopy(item))

    # ---- reasoning -----------------------------------------------------------------------

    def reasoning(self, delta: str) -> None:
        if not delta:
            return
        item = self._reasoning
        if item is None:
            item = {"id": new_id("rs"), "type": "reasoning", "summary": [], "content": [],
                    "status": "in_progress"}
            self._reasoning = item
            index = self._add(item)
            part = {"type": "reasoning_text", "text": ""}
            item["content"].append(part)
            self._emit("response.content_part.added", item_id=item["id"], output_index=index,
                       content_index=0, part=copy.deepcopy(part))
        item["content"][0]["text"] += delta
        self._emit("response.reasoning_text.delta", item_id=item["id"],
                   output_index=self._index(item), content_index=0, delta=delta)

    def reasoning_done(self, text: str, encrypted_content: str | None = None) -> None:
        """Closes the reasoning item with its final text (the parser's, separators stripped)."""
        if self._reasoning is None:
            if not text:
                return
            self.reasoning(text)
        item, self._reasoning = self._reasoning, None
        assert item is not None   # open, or just opened by reasoning(text)
        index = self._index(item)
        part = item["content"][0]
        part["text"] = text
        self._emit("response.reasoning_text.done", item_id=item["id"], output_index=index,
                   content_index=0, text=text)
        self._emit("response.content_part.done", item_id=item["id"], output_index=index,
                   content_index=0, part=copy.deepcopy(part))
        if encrypted_content is not None:
            item["encrypted_content"] = encrypted_content
        item["status"] = "completed"
        self._emit("response.output_item.done", output_index=index, item=copy.deepcopy(item))

    # ---- tool calls ----------------------------------------------------------------------

    def call_start(self, index: int, *, kind: str, name: str, namespace: str | None) -> None:
        """Opens a function_call or custom_tool_call item; text before it ends its message."""
        self._close_message("completed")
        if kind == "custom":
            item = {"id": new_id("ctc"), "type": "custom_tool_call", "call_id": new_id("call"),
                    "name": name, "input": "", "status": "in_progress"}
        else:
            item = {"id": new_id("fc"), "type": "function_call", "call_id": new_id("call"),
                    "name": name, "arguments": "", "status": "in_progress"}
        if namespace:
            item["namespace"] = namespace
        self._calls[index] = item
        self._add(item)

    def call_delta(self, index: int, delta: str) -> None:
        self._stream_into(self._calls[index], delta)

    def _stream_into(self, item: dict[str, Any], delta: str) -> None:
        field, event = _CALL_STREAM[item["type"]]
        item[field] += delta
        self._emit(f"{event}.delta", item_id=item["id"], output_index=self._index(item),
                   delta=delta)

    def call_done(self, index: int, final: str) -> None:
        """The final parse wins: whatever the deltas did not yet carry is sent, then `.done`."""
        item = self._calls.pop(index)
        field, event = _CALL_STREAM[item["type"]]
        streamed = item[field]
        if final != streamed and final.startswith(streamed):
            self._stream_into(item, final[len(streamed):])
        item[field] = final
        output_index = self._index(item)
        extra = {"name": item["name"]} if item["type"] == "function_call" else {}
        self._emit(f"{event}.done", item_id=item["id"], output_index=output_index,
                   **{field: final}, **extra)
        item["status"] = "completed"
        self._emit("response.output_item.done", output_index=output_index,
                   item=copy.deepcopy(item))

    def compaction(self, item: dict[str, Any], before: int, after: int) -> None:
        """The history was compacted before generation: the seed's two extension events,
        then the compaction item, complete, at the next output index (0)."""
        rid = self.obj["id"]
        self._emit("mlx.compaction.started", response_id=rid, input_tokens=before)
        self._emit("mlx.compaction.completed", response_id=rid, input_tokens_before=before,
                   input_tokens_after=after)
        index = self._add(item)
        self._emit("response.output_item.done", output_index=index, item=copy.deepcopy(item))

    def _add(self, item: dict[str, Any]) -> int:
        self.obj["output"].append(item)
        index = len(self.obj["output"]) - 1
        self._positions[item["id"]] = index
        self._emit("response.output_item.added", output_index=index, item=copy.deepcopy(item))
        return index

    def _close_open_items(self, status: str) -> None:
        self._close_message(status)
        for item in [*([self._reasoning] if self._reasoning else []), *self._calls.values()]:
            item["status"] = "incomplete"
            self._emit("response.output_item.done", output_index=self._index(item),
                       item=copy.deepcopy(item))
        self._reasoning = None
        self._calls.clear()

    # ---- terminal states -----------------------------------------------------------------

    def finish(self, status: Status, usage_: Usage) -> None:
        """completed, or incomplete because the token limit stopped generation."""
        self._close_open_items("completed" if status is Status.COMPLETED else "incomplete")
        self.obj["status"] = status.value
        self.obj["usage"] = usage_
        if status is Status.INCOMPLETE:
            self.obj["incomplete_details"] = {"reason": "max_output_tokens"}
        kind = "response.completed" if status is Status.COMPLETED else "response.incomplete"
        self._emit(kind, response=self._snapshot())

    def fail(self, code: str, message: str, usage_: Usage | None = None) -> None:
        self._close_open_items("incomplete")
        self.obj["status"] = Status.FAILED.value
        self.obj["error"] = {"code": code, "message": message}
        self.obj["usage"] = usage_
        self._emit("response.failed", response=self._snapshot())

    def cancel(self, usage_: Usage | None = None) -> None:
        """No event: OpenAI's stream has none for cancellation; the object records it."""
        for item in [self._message, self._reasoning, *self._calls.values()]:
            if item is not None:
                item["status"] = "incomplete"
        self._message = self._reasoning = None
        self._calls.clear()
        self.obj["status"] = Status.CANCELLED.value
        self.obj["usage"] = usage_


# Per call item type: the field its input streams into and its event family.
_CALL_STREAM = {
    "function_call": ("arguments", "response.function_call_arguments"),
    "custom_tool_call": ("input", "response.custom_tool_call_input"),
}
