"""Builds one response object and the typed stream events that describe it (pure, no trio).

The builder is the single source of both: the stream's events and the final object come from
the same calls, so ids and item order are identical in both by construction. Every event
carries a copy of the item, part or response it shows, taken when it was emitted.
"""

from __future__ import annotations

import copy
import time
from typing import Any, TypeVar

from .ids import new_id
from .lifecycle import Status, item_status
from .objects import (CallDeltaEvent, CallDoneEvent, CallItem, CompactionCompletedEvent,
                      CompactionStartedEvent, ContentPartEvent, Echo, IncompleteDetails,
                      CompactionItem, CustomToolCallItem, FunctionCallItem, ItemStatusEvent,
                      McpApprovalRequestItem, McpCallItem, McpListToolsItem, OutputItem,
                      OutputItemEvent, MessageItem, ReasoningItem, OutputTextPart,
                      ReasoningTextPart, ResponseError, ResponseEvent, ResponseObject,
                      StreamEvent, TextDeltaEvent, TextDoneEvent, Usage, usage)

T = TypeVar("T")


def _copy(value: T) -> T:
    return copy.deepcopy(value)


class ResponseBuilder:
    def __init__(self, response_id: str, echo: Echo, *, background: bool = False,
                 created_at: int | None = None):
        self.obj = ResponseObject.of(
            response_id, echo, created_at if created_at is not None else int(time.time()))
        if background:
            self.obj.background = True
            self.obj.usage = usage()   # all 0 until the job ends
        self.events: list[StreamEvent] = []
        self._message: MessageItem | None = None       # the open message item, if any
        self._text = OutputTextPart(logprobs=[])       # its text part
        self._reasoning: ReasoningItem | None = None   # the open reasoning item, if any
        self._thought = ReasoningTextPart()            # its text part
        self._calls: dict[int, CallItem | McpCallItem] = {}   # open tool calls by parser index
        self._mcp_open: dict[str, McpCallItem] = {}   # MCP calls started, not yet ended
        self._positions: dict[str, int] = {}              # item id → output_index

    # ---- events --------------------------------------------------------------------------

    def _seq(self) -> int:
        return len(self.events)

    def _lifecycle(self, type_: str) -> None:
        self.events.append(ResponseEvent(type=type_, sequence_number=self._seq(),
                                         response=_copy(self.obj)))

    def _item_event(self, type_: str, index: int, item: OutputItem) -> None:
        self.events.append(OutputItemEvent(type=type_, sequence_number=self._seq(),
                                           output_index=index, item=_copy(item)))

    def _part_event(self, type_: str, item_id: str, index: int,
                    part: OutputTextPart | ReasoningTextPart) -> None:
        self.events.append(ContentPartEvent(type=type_, sequence_number=self._seq(),
                                            item_id=item_id, output_index=index,
                                            content_index=0, part=_copy(part)))

    def created(self) -> None:
        self._lifecycle("response.created")

    def enter(self, status: Status, usage_: Usage | None = None,
              error: ResponseError | None = None) -> None:
        """Renders the status its lifecycle (lifecycle.Lifecycle) entered: the object's
        status and the events it sends. `usage_` for an end; `error` for `failed`."""
        if status is Status.IN_PROGRESS:
            self.obj.status = status
            self._lifecycle("response.in_progress")
        elif status is Status.FAILED:
            assert error is not None
            self._fail(error, usage_)
        elif status is Status.CANCELLED:
            self._cancel(usage_)
        else:
            assert usage_ is not None
            self._finish(status, usage_)

    def text(self, delta: str, logprobs: list[dict[str, Any]] | None = None) -> None:
        if not delta:
            return
        item = self._message if self._message is not None else self._open_message()
        part = self._text
        part.text += delta
        assert part.logprobs is not None   # generated text keeps its (maybe empty) logprobs
        part.logprobs += logprobs or []
        self.events.append(TextDeltaEvent(
            type="response.output_text.delta", sequence_number=self._seq(), item_id=item.id,
            output_index=self._positions[item.id], content_index=0, delta=delta,
            logprobs=logprobs or []))

    def _open_message(self) -> MessageItem:
        part = self._text = OutputTextPart(logprobs=[])
        item = MessageItem(id=new_id("msg"), content=[])
        self._message = item
        index = self._add(item)
        item.content.append(part)
        self._part_event("response.content_part.added", item.id, index, part)
        return item

    def _close_message(self, status: str) -> None:
        item, self._message = self._message, None
        if item is None:
            return
        index = self._positions[item.id]
        part = self._text
        self.events.append(TextDoneEvent(
            type="response.output_text.done", sequence_number=self._seq(), item_id=item.id,
            output_index=index, content_index=0, text=part.text, logprobs=_copy(part.logprobs)))
        self._part_event("response.content_part.done", item.id, index, part)
        item.status = status
        self._item_event("response.output_item.done", index, item)

    # ---- reasoning -----------------------------------------------------------------------

    def reasoning(self, delta: str) -> None:
        if not delta:
            return
        item = self._reasoning
        if item is None:
            item = ReasoningItem(id=new_id("rs"), content=[], status="in_progress")
            self._reasoning = item
            index = self._add(item)
            part = self._thought = ReasoningTextPart()
            item.content = [part]
            self._part_event("response.content_part.added", item.id, index, part)
        self._thought.text += delta
        self.events.append(TextDeltaEvent(
            type="response.reasoning_text.delta", sequence_number=self._seq(),
            item_id=item.id, output_index=self._positions[item.id], content_index=0,
            delta=delta))

    def reasoning_done(self, text: str, encrypted_content: str | None = None) -> None:
        """Closes the reasoning item with its final text (the parser's, separators stripped)."""
        if self._reasoning is None:
            if not text:
                return
            self.reasoning(text)
        item, self._reasoning = self._reasoning, None
        assert item is not None   # open, or just opened by reasoning(text)
        index = self._positions[item.id]
        part = self._thought
        part.text = text
        self.events.append(TextDoneEvent(
            type="response.reasoning_text.done", sequence_number=self._seq(), item_id=item.id,
            output_index=index, content_index=0, text=text))
        self._part_event("response.content_part.done", item.id, index, part)
        if encrypted_content is not None:
            item.encrypted_content = encrypted_content
        item.status = "completed"
        self._item_event("response.output_item.done", index, item)

    # ---- tool calls ----------------------------------------------------------------------

    def call_start(self, index: int, *, kind: str, name: str, namespace: str | None) -> None:
        """Opens a function_call or custom_tool_call item; text before it ends its message."""
        self._close_message("completed")
        item: CallItem
        if kind == "custom":
            item = CustomToolCallItem(id=new_id("ctc"), call_id=new_id("call"), name=name,
                                        namespace=namespace or None)
        else:
            item = FunctionCallItem(id=new_id("fc"), call_id=new_id("call"), name=name,
                                      namespace=namespace or None)
        self._calls[index] = item
        self._add(item)

    def call_delta(self, index: int, delta: str) -> None:
        self._stream_into(self._calls[index], delta)

    def _stream_into(self, item: CallItem | McpCallItem, delta: str) -> None:
        if isinstance(item, McpCallItem):
            item.arguments += delta
            type_ = "response.mcp_call_arguments.delta"
        elif isinstance(item, FunctionCallItem):
            item.arguments += delta
            type_ = "response.function_call_arguments.delta"
        else:
            item.input += delta
            type_ = "response.custom_tool_call_input.delta"
        self.events.append(CallDeltaEvent(type=type_, sequence_number=self._seq(),
                                          item_id=item.id,
                                          output_index=self._positions[item.id], delta=delta))

    def call_done(self, index: int, final: str) -> None:
        """The final parse wins: whatever the deltas did not yet carry is sent, then `.done`."""
        item = self._calls.pop(index)
        if isinstance(item, McpCallItem):
            self._mcp_arguments_done(item, final)
            return
        streamed = item.arguments if isinstance(item, FunctionCallItem) else item.input
        if final != streamed and final.startswith(streamed):
            self._stream_into(item, final[len(streamed):])
        output_index = self._positions[item.id]
        if isinstance(item, FunctionCallItem):
            item.arguments = final
            done = CallDoneEvent(type="response.function_call_arguments.done",
                                 sequence_number=self._seq(), item_id=item.id,
                                 output_index=output_index, arguments=final, name=item.name)
        else:
            item.input = final
            done = CallDoneEvent(type="response.custom_tool_call_input.done",
                                 sequence_number=self._seq(), item_id=item.id,
                                 output_index=output_index, input=final)
        self.events.append(done)
        item.status = "completed"
        self._item_event("response.output_item.done", output_index, item)

    # ---- MCP -----------------------------------------------------------------------------

    def _status_event(self, type_: str, item_id: str) -> None:
        self.events.append(ItemStatusEvent(type=type_, sequence_number=self._seq(),
                                           item_id=item_id,
                                           output_index=self._positions[item_id]))

    def mcp_listing(self, label: str, tools: list[dict[str, Any]], error: str | None,
                    item_id: str | None = None) -> McpListToolsItem:
        """A server's listing, as OpenAI streams one: the item added without tools,
        in_progress, completed (or failed), the item done with its tools (or error)."""
        self._close_message("completed")
        item = McpListToolsItem(id=item_id or new_id("mcpl"), server_label=label)
        self._add(item)
        self._status_event("response.mcp_list_tools.in_progress", item.id)
        item.tools, item.error = _copy(tools), error
        self._status_event("response.mcp_list_tools.failed" if error is not None
                           else "response.mcp_list_tools.completed", item.id)
        self._item_event("response.output_item.done", self._positions[item.id], item)
        return item

    def mcp_call_start(self, index: int | None, *, label: str, name: str,
                       approval_request_id: str | None = None) -> McpCallItem:
        """Opens an mcp_call (added with empty arguments, then in_progress); its arguments
        stream under `index` (call_delta, call_done), and `mcp_call_end` ends it."""
        self._close_message("completed")
        item = McpCallItem(id=new_id("mcp"), server_label=label, name=name,
                           approval_request_id=approval_request_id)
        self._add(item)
        self._status_event("response.mcp_call.in_progress", item.id)
        self._mcp_open[item.id] = item
        if index is not None:
            self._calls[index] = item
        return item

    def _mcp_arguments_done(self, item: McpCallItem, final: str) -> None:
        if final != item.arguments and final.startswith(item.arguments):
            self._stream_into(item, final[len(item.arguments):])
        item.arguments = final
        self.events.append(CallDoneEvent(type="response.mcp_call_arguments.done",
                                         sequence_number=self._seq(), item_id=item.id,
                                         output_index=self._positions[item.id],
                                         arguments=final))

    def mcp_call_whole(self, *, label: str, name: str, arguments: str,
                       approval_request_id: str | None = None) -> McpCallItem:
        """An mcp_call whose arguments are known (an approved request): opened, its
        arguments sent in one delta, done; `mcp_call_end` ends it."""
        item = self.mcp_call_start(None, label=label, name=name,
                                   approval_request_id=approval_request_id)
        self._mcp_arguments_done(item, arguments)
        return item

    def mcp_call_end(self, item: McpCallItem, output: str | None,
                     error: dict[str, Any] | None) -> None:
        """The call ran: completed with its output, or failed with its error."""
        del self._mcp_open[item.id]
        item.output, item.error = output, error
        item.status = "failed" if error is not None else "completed"
        self._status_event(f"response.mcp_call.{item.status}", item.id)
        self._item_event("response.output_item.done", self._positions[item.id], item)

    def mcp_approval_request(self, *, label: str, name: str, arguments: str
                             ) -> McpApprovalRequestItem:
        """A call that waits for the client's approval: added and done, whole."""
        self._close_message("completed")
        item = McpApprovalRequestItem(id=new_id("mcpr"), server_label=label, name=name,
                                      arguments=arguments)
        index = self._add(item)
        self._item_event("response.output_item.done", index, item)
        return item

    def compaction(self, item: CompactionItem, before: int, after: int) -> None:
        """The history was compacted before generation: the two extension events,
        then the compaction item, complete, at the next output index (0)."""
        rid = self.obj.id
        self.events.append(CompactionStartedEvent(sequence_number=self._seq(), response_id=rid,
                                                  input_tokens=before))
        self.events.append(CompactionCompletedEvent(
            sequence_number=self._seq(), response_id=rid, input_tokens_before=before,
            input_tokens_after=after))
        index = self._add(item)
        self._item_event("response.output_item.done", index, item)

    def _add(self, item: OutputItem) -> int:
        self.obj.output.append(item)
        index = len(self.obj.output) - 1
        self._positions[item.id] = index
        self._item_event("response.output_item.added", index, item)
        return index

    def _open_items(self) -> list[ReasoningItem | CallItem | McpCallItem]:
        calls = {id(c): c for c in [*self._calls.values(), *self._mcp_open.values()]}
        return [*([self._reasoning] if self._reasoning else []), *calls.values()]

    def _close_open_items(self, status: str) -> None:
        self._close_message(status)
        for item in self._open_items():
            item.status = item_status(Status.INCOMPLETE)   # an item cut off never completes
            self._item_event("response.output_item.done", self._positions[item.id], item)
        self._reasoning = None
        self._calls.clear()
        self._mcp_open.clear()

    # ---- terminal states -----------------------------------------------------------------

    def _end(self, status: Status, usage_: Usage | None) -> None:
        self.obj.status = status
        self.obj.usage = usage_
        self.obj.completed_at = int(time.time())

    def _finish(self, status: Status, usage_: Usage) -> None:
        """completed, or incomplete because the token limit stopped generation."""
        self._close_open_items(item_status(status))
        self._end(status, usage_)
        if status is Status.INCOMPLETE:
            self.obj.incomplete_details = IncompleteDetails("max_output_tokens")
        self._lifecycle("response.completed" if status is Status.COMPLETED
                        else "response.incomplete")

    def _fail(self, error: ResponseError, usage_: Usage | None) -> None:
        self._close_open_items(item_status(Status.FAILED))
        self._end(Status.FAILED, usage_)
        self.obj.error = error
        self._lifecycle("response.failed")

    def _cancel(self, usage_: Usage | None) -> None:
        """No event: OpenAI's stream has none for cancellation; the object records it."""
        for item in [self._message, *self._open_items()]:
            if item is not None:
                item.status = item_status(Status.INCOMPLETE)
        self._message = self._reasoning = None
        self._calls.clear()
        self._mcp_open.clear()
        self._end(Status.CANCELLED, usage_)
