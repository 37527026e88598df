"""The objects the API answers with, as types: usage, items, the response object and its
stream events.

Every answer triode makes of a response is one of these: `builder.ResponseBuilder` makes the
response object and its events, the stores keep them as JSON, SSE, the WebSocket and the
background poll send them, and the OpenAPI document is generated from them (http/schema.py).
JSON is produced from them at one place, `plain` (one cattrs converter): a field marked
`omitted` is left out while it is None, every other field is always present (null where it
has no value), as the `openai` SDK's `Response` model and the Open Responses schema require
(docs/architecture.md, "Response objects").

Input and output items are the same types (`Item`); what a store keeps is their JSON, and
`item_of` / `response_of` read it back.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal, Union

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from .lifecycle import Status

# A field left out of the JSON while it is None (the API's optional keys).
OMITTED: dict[str, bool] = {"omitted": True}


def omitted(default: Any = None) -> Any:
    return attrs.field(default=default, metadata=OMITTED)


def answer(cls: type) -> type:
    """Marks an attrs class as an answer type (http/schema.py: every field is required but
    the omitted ones, other keys allowed)."""
    setattr(cls, "__triode_answer__", True)
    return cls


def schema_name(name: str) -> Any:
    """The name of a class's schema in the OpenAPI document, where its own would clash with
    a request type's (`wire.ReasoningItem`) or change a published name."""
    def name_it(cls: type) -> type:
        setattr(cls, "__schema_name__", name)
        return cls
    return name_it


# ---- usage -------------------------------------------------------------------------------

@answer
@attrs.frozen
class InputTokensDetails:
    cached_tokens: int = 0
    cache_write_tokens: int = 0


@answer
@attrs.frozen
class OutputTokensDetails:
    reasoning_tokens: int = 0


@answer
@attrs.frozen
class Usage:
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int

    @property
    def cached_tokens(self) -> int:
        return self.input_tokens_details.cached_tokens

    def __add__(self, other: Usage) -> Usage:
        """Two responses' tokens together (a WebSocket's line sums its responses')."""
        return usage(self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens,
                     self.cached_tokens + other.cached_tokens,
                     self.output_tokens_details.reasoning_tokens
                     + other.output_tokens_details.reasoning_tokens)


def usage(input_tokens: int = 0, output_tokens: int = 0, cached_tokens: int = 0,
          reasoning_tokens: int = 0) -> Usage:
    return Usage(input_tokens, InputTokensDetails(cached_tokens), output_tokens,
                 OutputTokensDetails(reasoning_tokens), input_tokens + output_tokens)


# ---- content parts and items -------------------------------------------------------------
# One set of item types for input and output alike: a request's input items (made canonical
# by `items.canonical`), a response's output, a conversation's items and the kept items of a
# compaction. The items the builder makes grow while they stream (their text, arguments,
# status), so they are mutable; every event carries a copy, frozen in time.

@schema_name("InputTextObject")
@answer
@attrs.define(kw_only=True)
class InputTextPart:
    type: Literal["input_text"] = "input_text"
    text: str


@schema_name("OutputTextObject")
@answer
@attrs.define(kw_only=True)
class OutputTextPart:
    type: Literal["output_text"] = "output_text"
    text: str = ""
    annotations: list[Any] = attrs.Factory(list)
    logprobs: list[dict[str, Any]] | None = omitted()   # generated text only


@schema_name("RefusalObject")
@answer
@attrs.define(kw_only=True)
class RefusalPart:
    type: Literal["refusal"] = "refusal"
    refusal: str


@schema_name("ReasoningTextObject")
@answer
@attrs.define(kw_only=True)
class ReasoningTextPart:
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str = ""


@schema_name("SummaryTextObject")
@answer
@attrs.define(kw_only=True)
class SummaryTextPart:
    type: Literal["summary_text"] = "summary_text"
    text: str


@schema_name("InputImageObject")
@answer
@attrs.define(kw_only=True)
class InputImagePart:
    """An image of the input, as a data URL of its bytes (a fetched image's too:
    service/media.py), so a chain replays it without fetching again."""

    type: Literal["input_image"] = "input_image"
    image_url: str
    detail: str = "auto"


ContentPart = Union[InputTextPart, OutputTextPart, RefusalPart, InputImagePart]


@schema_name("MessageObject")
@answer
@attrs.define(kw_only=True)
class MessageItem:
    type: Literal["message"] = "message"
    id: str
    role: Literal["user", "system", "developer", "assistant"] = "assistant"
    content: list[ContentPart]
    status: str = "in_progress"
    phase: str | None = omitted()
    # The summary a compaction replays (compaction.summary_message): never sent or stored.
    triode_summary: bool | None = omitted()


@schema_name("FunctionCallObject")
@answer
@attrs.define(kw_only=True)
class FunctionCallItem:
    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str = ""
    status: str = "in_progress"
    namespace: str | None = omitted()


@schema_name("CustomToolCallObject")
@answer
@attrs.define(kw_only=True)
class CustomToolCallItem:
    type: Literal["custom_tool_call"] = "custom_tool_call"
    id: str
    call_id: str
    name: str
    input: str = ""
    status: str = "in_progress"
    namespace: str | None = omitted()


@schema_name("FunctionCallOutputObject")
@answer
@attrs.frozen(kw_only=True)
class FunctionCallOutputItem:
    type: Literal["function_call_output"] = "function_call_output"
    id: str
    call_id: str
    output: str | list[ContentPart]
    status: str = "completed"


@schema_name("CustomToolCallOutputObject")
@answer
@attrs.frozen(kw_only=True)
class CustomToolCallOutputItem:
    type: Literal["custom_tool_call_output"] = "custom_tool_call_output"
    id: str
    call_id: str
    output: str | list[ContentPart]
    status: str = "completed"


@schema_name("ReasoningObject")
@answer
@attrs.define(kw_only=True)
class ReasoningItem:
    type: Literal["reasoning"] = "reasoning"
    id: str
    summary: list[SummaryTextPart] = attrs.Factory(list)
    content: list[ReasoningTextPart] | None = omitted()
    encrypted_content: str | None = omitted()
    status: str | None = omitted()          # generated reasoning only


@schema_name("CompactionObject")
@answer
@attrs.frozen(kw_only=True)
class CompactionItem:
    type: Literal["compaction"] = "compaction"
    id: str
    encrypted_content: str


@schema_name("AdditionalToolsObject")
@answer
@attrs.frozen(kw_only=True)
class AdditionalToolsItem:
    type: Literal["additional_tools"] = "additional_tools"
    id: str
    role: Literal["developer", "system"] = "developer"
    tools: list[dict[str, Any]]


# ---- MCP items (docs/mcp.md) ---------------------------------------------------------------
# A server's tools as listed, a call the server ran, a call waiting for the client's approval
# and the client's answer. They carry the server's label, never its URL or credentials.

@schema_name("McpListToolsObject")
@answer
@attrs.define(kw_only=True)
class McpListToolsItem:
    type: Literal["mcp_list_tools"] = "mcp_list_tools"
    id: str
    server_label: str
    tools: list[dict[str, Any]] = attrs.Factory(list)   # {name, input_schema, description,
                                                        #  annotations}
    error: str | None = None


@schema_name("McpCallObject")
@answer
@attrs.define(kw_only=True)
class McpCallItem:
    type: Literal["mcp_call"] = "mcp_call"
    id: str
    server_label: str
    name: str
    arguments: str = ""
    output: str | None = None
    error: dict[str, Any] | None = None   # {type: mcp_protocol_error | mcp_tool_execution_error
                                          #  | http_error, ...}
    approval_request_id: str | None = None
    status: str = "in_progress"


@schema_name("McpApprovalRequestObject")
@answer
@attrs.define(kw_only=True)
class McpApprovalRequestItem:
    type: Literal["mcp_approval_request"] = "mcp_approval_request"
    id: str
    server_label: str
    name: str
    arguments: str = ""


@schema_name("McpApprovalResponseObject")
@answer
@attrs.frozen(kw_only=True)
class McpApprovalResponseItem:
    type: Literal["mcp_approval_response"] = "mcp_approval_response"
    id: str
    approval_request_id: str
    approve: bool
    reason: str | None = None


McpItem = Union[McpListToolsItem, McpCallItem, McpApprovalRequestItem]
CallItem = Union[FunctionCallItem, CustomToolCallItem]
CallOutputItem = Union[FunctionCallOutputItem, CustomToolCallOutputItem]
Item = Union[MessageItem, FunctionCallItem, CustomToolCallItem, FunctionCallOutputItem,
             CustomToolCallOutputItem, ReasoningItem, CompactionItem, AdditionalToolsItem,
             McpListToolsItem, McpCallItem, McpApprovalRequestItem, McpApprovalResponseItem]
# What a response's output holds (the builder makes these).
OutputItem = Union[MessageItem, FunctionCallItem, CustomToolCallItem, ReasoningItem,
                   CompactionItem, McpListToolsItem, McpCallItem, McpApprovalRequestItem]


# ---- the fields a response echoes --------------------------------------------------------

@answer
@attrs.frozen
class ResponseReasoning:
    effort: str | None = None
    summary: str | None = None
    context: str | None = omitted()


@answer
@attrs.frozen
class ResponseTextConfig:
    format: dict[str, Any]
    verbosity: str | None = omitted()


@answer
@attrs.frozen
class ConversationRef:
    id: str


@attrs.define(kw_only=True)
class EchoedFields:
    """The request fields a response echoes, with their effective values: the fields of
    `Echo` (what `translate.plan` makes) and of the response object that carries them."""

    instructions: str | None
    max_output_tokens: int | None
    max_tool_calls: int | None
    metadata: dict[str, str]
    model: str
    parallel_tool_calls: bool
    previous_response_id: str | None
    conversation: ConversationRef | None
    reasoning: ResponseReasoning
    store: bool
    temperature: float
    text: ResponseTextConfig
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    top_p: float
    presence_penalty: float
    frequency_penalty: float
    top_logprobs: int
    truncation: Literal["auto", "disabled"]
    user: str | None
    service_tier: str
    prompt_cache_key: str | None
    prompt_cache_retention: str | None
    safety_identifier: str | None
    # Echoed as given (or their effective value) when a request sets them, else null.
    prompt: dict[str, Any] | None = None
    prompt_cache_options: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    access_programs: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class Echo(EchoedFields):
    """The echoed fields of one request (`translate.plan`); every response made for it
    starts from them (`ResponseObject.of`)."""


# ---- the response object -----------------------------------------------------------------

@answer
@attrs.frozen
class ResponseError:
    code: str
    message: str


@answer
@attrs.frozen
class IncompleteDetails:
    reason: str


@answer
@attrs.define(kw_only=True)
class ResponseObject(EchoedFields):
    """A response object: every field of the `openai` SDK's `Response` model and of Open
    Responses' required list, null where it has no value (docs/architecture.md). Its JSON
    opens with the fields of `JSON_FIRST`, then the echoed ones, then the rest."""

    JSON_FIRST: ClassVar[tuple[str, ...]] = (
        "id", "object", "created_at", "completed_at", "status", "error", "incomplete_details",
        "output", "usage")

    id: str
    object: Literal["response"] = "response"
    created_at: int
    completed_at: int | None = None
    status: Status = Status.QUEUED
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    output: list[OutputItem] = attrs.Factory(list)
    usage: Usage | None = None
    # Fields of the SDK's model that have no local value here (null).
    prompt_cache_diagnostics: dict[str, Any] | None = None
    tool_usage: dict[str, Any] | None = None
    input_transformations: list[dict[str, Any]] | None = None
    moderation: dict[str, Any] | None = None
    # Always present: false on a foreground response, true on a background job (the SDK's
    # model and Open Responses require it; the seed omitted it, docs/conformance.md).
    background: bool = False

    @classmethod
    def of(cls, response_id: str, echo: Echo, created_at: int) -> ResponseObject:
        return cls(id=response_id, created_at=created_at,
                   **{f.name: getattr(echo, f.name) for f in attrs.fields(EchoedFields)})


@answer
@attrs.frozen
class CompactedHistory:
    """What `POST /v1/responses/compact` answers: the system/developer messages, the kept
    items and the compaction item, in that order."""

    id: str
    created_at: int
    model: str
    output: list[Item]
    usage: Usage
    object: Literal["response.compaction"] = "response.compaction"


# ---- stream events -----------------------------------------------------------------------
# One class per event shape; `type` names the event (the SSE `event:` line). Frozen: an
# event is a record of one moment, its item or response a copy taken then.

@answer
@attrs.frozen(kw_only=True)
class ResponseEvent:
    """response.created, .in_progress, .completed, .incomplete, .failed."""

    type: str
    sequence_number: int
    response: ResponseObject


@answer
@attrs.frozen(kw_only=True)
class OutputItemEvent:
    """response.output_item.added / .done."""

    type: str
    sequence_number: int
    output_index: int
    item: OutputItem


@answer
@attrs.frozen(kw_only=True)
class ContentPartEvent:
    """response.content_part.added / .done."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: OutputTextPart | ReasoningTextPart


@answer
@attrs.frozen(kw_only=True)
class TextDeltaEvent:
    """response.output_text.delta (with its logprobs) and response.reasoning_text.delta."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[dict[str, Any]] | None = omitted()


@answer
@attrs.frozen(kw_only=True)
class TextDoneEvent:
    """response.output_text.done (with its logprobs) and response.reasoning_text.done."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[dict[str, Any]] | None = omitted()


@answer
@attrs.frozen(kw_only=True)
class CallDeltaEvent:
    """response.function_call_arguments.delta, response.custom_tool_call_input.delta."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


@answer
@attrs.frozen(kw_only=True)
class CallDoneEvent:
    """response.function_call_arguments.done (arguments, name) and
    response.custom_tool_call_input.done (input)."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    arguments: str | None = omitted()
    input: str | None = omitted()
    name: str | None = omitted()


@answer
@attrs.frozen(kw_only=True)
class ItemStatusEvent:
    """An MCP item's progress: response.mcp_list_tools.in_progress / .completed / .failed
    and response.mcp_call.in_progress / .completed / .failed."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int


@answer
@attrs.frozen(kw_only=True)
class CompactionStartedEvent:
    """mlx.compaction.started (an extension event: docs/architecture.md)."""

    type: Literal["mlx.compaction.started"] = "mlx.compaction.started"
    sequence_number: int
    response_id: str
    input_tokens: int


@answer
@attrs.frozen(kw_only=True)
class CompactionCompletedEvent:
    """mlx.compaction.completed (an extension event: docs/architecture.md)."""

    type: Literal["mlx.compaction.completed"] = "mlx.compaction.completed"
    sequence_number: int
    response_id: str
    input_tokens_before: int
    input_tokens_after: int


StreamEvent = Union[ResponseEvent, OutputItemEvent, ContentPartEvent, TextDeltaEvent,
                    TextDoneEvent, CallDeltaEvent, CallDoneEvent, ItemStatusEvent,
                    CompactionStartedEvent, CompactionCompletedEvent]


# ---- JSON --------------------------------------------------------------------------------

_json = cattrs.Converter()


def _unstructure_factory(cls: type) -> Any:
    overrides: dict[str, Any] = {a.name: override(omit_if_default=True)
                                 for a in attrs.fields(cls) if a.metadata.get("omitted")}
    fields: Any = make_dict_unstructure_fn(cls, _json, **overrides)
    first: tuple[str, ...] = getattr(cls, "JSON_FIRST", ())
    if not first:
        return fields

    def ordered(value: Any) -> dict[str, Any]:
        out: dict[str, Any] = fields(value)
        return {**{name: out.pop(name) for name in first}, **out}

    return ordered


_json.register_unstructure_hook_factory(attrs.has, _unstructure_factory)


ITEM_TYPES: dict[str, type] = {
    "message": MessageItem, "function_call": FunctionCallItem,
    "custom_tool_call": CustomToolCallItem, "function_call_output": FunctionCallOutputItem,
    "custom_tool_call_output": CustomToolCallOutputItem, "reasoning": ReasoningItem,
    "compaction": CompactionItem, "additional_tools": AdditionalToolsItem,
    "mcp_list_tools": McpListToolsItem, "mcp_call": McpCallItem,
    "mcp_approval_request": McpApprovalRequestItem,
    "mcp_approval_response": McpApprovalResponseItem}
_CONTENT_PARTS: dict[str, type] = {"input_text": InputTextPart, "output_text": OutputTextPart,
                                   "refusal": RefusalPart, "input_image": InputImagePart}
_EVENT_PARTS: dict[str, type] = {"output_text": OutputTextPart,
                                 "reasoning_text": ReasoningTextPart}


def _by_type(table: dict[str, type]) -> Any:
    def hook(value: Any, _: Any) -> Any:
        return _json.structure(value, table[value["type"]])
    return hook


def _text_or_parts(value: Any, _: Any) -> Any:
    return value if isinstance(value, str) else _json.structure(value, list[ContentPart])


_json.register_structure_hook_func(lambda t: t in (Item, OutputItem), _by_type(ITEM_TYPES))
_json.register_structure_hook_func(lambda t: t == ContentPart, _by_type(_CONTENT_PARTS))
_json.register_structure_hook_func(lambda t: t == OutputTextPart | ReasoningTextPart,
                                   _by_type(_EVENT_PARTS))
_json.register_structure_hook_func(lambda t: t == str | list[ContentPart], _text_or_parts)
# JSON values kept as they are (a tool_choice, the free-form fields).
_FREE = (str | dict[str, Any], dict[str, Any] | None, list[dict[str, Any]] | None)


def _kept(value: Any, _: Any) -> Any:
    return value


_json.register_structure_hook_func(lambda t: t in _FREE, _kept)


def item_of(value: dict[str, Any]) -> Item:
    """An item read back from its JSON (a store's record, a compaction's kept items)."""
    item: Item = _json.structure(value, ITEM_TYPES[value["type"]])
    return item


def items_of(values: list[dict[str, Any]]) -> list[Item]:
    return [item_of(value) for value in values]


def response_of(value: dict[str, Any]) -> ResponseObject:
    """A response object read back from its JSON (a store's record)."""
    response: ResponseObject = _json.structure(value, ResponseObject)
    return response


# The stream events by their `type`: what a stored or mirrored event log is read back as.
EVENT_TYPES: dict[str, type] = {
    **dict.fromkeys(("response.created", "response.in_progress", "response.completed",
                     "response.incomplete", "response.failed"), ResponseEvent),
    **dict.fromkeys(("response.output_item.added", "response.output_item.done"),
                    OutputItemEvent),
    **dict.fromkeys(("response.content_part.added", "response.content_part.done"),
                    ContentPartEvent),
    **dict.fromkeys(("response.output_text.delta", "response.reasoning_text.delta"),
                    TextDeltaEvent),
    **dict.fromkeys(("response.output_text.done", "response.reasoning_text.done"),
                    TextDoneEvent),
    **dict.fromkeys(("response.function_call_arguments.delta",
                     "response.custom_tool_call_input.delta",
                     "response.mcp_call_arguments.delta"), CallDeltaEvent),
    **dict.fromkeys(("response.function_call_arguments.done",
                     "response.custom_tool_call_input.done",
                     "response.mcp_call_arguments.done"), CallDoneEvent),
    **dict.fromkeys((f"response.{kind}.{stage}" for kind in ("mcp_list_tools", "mcp_call")
                     for stage in ("in_progress", "completed", "failed")), ItemStatusEvent),
    "mlx.compaction.started": CompactionStartedEvent,
    "mlx.compaction.completed": CompactionCompletedEvent,
}


def event_of(value: dict[str, Any]) -> StreamEvent:
    """A stream event read back from its JSON (a store's event log, the job board's)."""
    event: StreamEvent = _json.structure(value, EVENT_TYPES[value["type"]])
    return event


def plain(value: Any) -> Any:
    """The JSON-shaped value (dicts, lists, scalars) of any object here; a value that
    already is JSON-shaped (read back from a store) comes back as it is."""
    return _json.unstructure(value)


# One encoder for every answer: json.dumps with non-default options builds one per call.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def dumps(value: Any) -> str:
    """The JSON text of any object here (or of JSON-shaped data)."""
    return _encode(plain(value))


