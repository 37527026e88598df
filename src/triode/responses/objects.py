"""The objects the API answers with, as types: canonical items, the fields a response
echoes and the response object.

The builders work on plain dicts (`items.canonical`, `builder.ResponseBuilder`; the echo is
typed by `Echo` where `translate.plan` makes it); these types describe those dicts for the
OpenAPI document (http/schema.py generates its response schemas from them), and
tests/http/test_openapi.py checks what the builders really make against that document.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, Union

from .ids import Usage
from .lifecycle import Status


# ---- canonical items, as the API answers with them --------------------------------------
# What `items.canonical` makes of input items and the response builder of output items:
# input_items, a response's `output` and a conversation's items are lists of these.

class InputTextObject(TypedDict):
    type: Literal["input_text"]
    text: str


class OutputTextObject(TypedDict):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    logprobs: NotRequired[list[Any]]   # generated text only


class RefusalObject(TypedDict):
    type: Literal["refusal"]
    refusal: str


ContentPartObject = Union[InputTextObject, OutputTextObject, RefusalObject]


class MessageObject(TypedDict):
    type: Literal["message"]
    id: str
    role: Literal["user", "system", "developer", "assistant"]
    status: str
    content: list[ContentPartObject]


class FunctionCallObject(TypedDict):
    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str
    status: str
    namespace: NotRequired[str]


class CustomToolCallObject(TypedDict):
    type: Literal["custom_tool_call"]
    id: str
    call_id: str
    name: str
    input: str
    status: str
    namespace: NotRequired[str]


class FunctionCallOutputObject(TypedDict):
    type: Literal["function_call_output"]
    id: str
    call_id: str
    output: str | list[ContentPartObject]
    status: str


class CustomToolCallOutputObject(TypedDict):
    type: Literal["custom_tool_call_output"]
    id: str
    call_id: str
    output: str | list[ContentPartObject]
    status: str


class ReasoningTextObject(TypedDict):
    type: Literal["reasoning_text", "summary_text"]
    text: str


class ReasoningObject(TypedDict):
    type: Literal["reasoning"]
    id: str
    summary: list[ReasoningTextObject]
    content: NotRequired[list[ReasoningTextObject]]
    encrypted_content: NotRequired[str]
    status: NotRequired[str]           # generated reasoning only


class CompactionObject(TypedDict):
    type: Literal["compaction"]
    id: str
    encrypted_content: str


class AdditionalToolsObject(TypedDict):
    type: Literal["additional_tools"]
    id: str
    role: Literal["developer", "system"]
    tools: list[dict[str, Any]]


ItemObject = Union[MessageObject, FunctionCallObject, CustomToolCallObject,
                   FunctionCallOutputObject, CustomToolCallOutputObject, ReasoningObject,
                   CompactionObject, AdditionalToolsObject]


# ---- the response object ------------------------------------------------------------------
# The request fields a response echoes (`translate.plan` builds them, typed by `Echo`), and
# the object around them that the builder keeps; the OpenAPI document describes responses
# with these types (http/schema.py).

class ReasoningEcho(TypedDict):
    effort: str | None
    summary: str | None
    context: NotRequired[str]


class TextEcho(TypedDict):
    format: dict[str, Any]
    verbosity: NotRequired[str]


class ConversationRef(TypedDict):
    id: str


class Echo(TypedDict):
    instructions: str | None
    max_output_tokens: int | None
    max_tool_calls: int | None
    metadata: dict[str, str]
    model: str
    parallel_tool_calls: bool
    previous_response_id: str | None
    conversation: ConversationRef | None
    reasoning: ReasoningEcho
    store: bool
    temperature: float
    text: TextEcho
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    top_p: float
    top_logprobs: int
    truncation: Literal["auto", "disabled"]
    user: str | None
    service_tier: str
    prompt_cache_key: str | None
    safety_identifier: str | None


class ResponseError(TypedDict):
    code: str
    message: str


class IncompleteDetails(TypedDict):
    reason: str


class ResponseObject(Echo):
    id: str
    object: Literal["response"]
    created_at: int
    status: Status
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    output: list[ItemObject]
    usage: Usage | None
    background: NotRequired[bool]


class CompactedHistory(TypedDict):
    """What `POST /v1/responses/compact` answers: the system/developer messages, the kept
    items and the compaction item, in that order."""

    id: str
    object: Literal["response.compaction"]
    created_at: int
    model: str
    output: list[ItemObject]
    usage: Usage


class StreamEvent(TypedDict):
    """One typed event of a response's stream, as `builder.ResponseBuilder` emits it (the SSE
    `data` of each frame, a WebSocket text frame); which other fields it has depends on its
    `type`."""

    type: str
    sequence_number: int
    response: NotRequired[ResponseObject]     # response.created, .in_progress, .completed ...
    item: NotRequired[ItemObject]             # response.output_item.added / .done
    part: NotRequired[ContentPartObject | ReasoningTextObject]   # content_part.added / .done
    item_id: NotRequired[str]
    output_index: NotRequired[int]
    content_index: NotRequired[int]
    delta: NotRequired[str]
    text: NotRequired[str]
    logprobs: NotRequired[list[Any]]
    arguments: NotRequired[str]
    input: NotRequired[str]
    name: NotRequired[str]
    response_id: NotRequired[str]             # mlx.compaction.started / .completed
    input_tokens: NotRequired[int]
    input_tokens_before: NotRequired[int]
    input_tokens_after: NotRequired[int]
