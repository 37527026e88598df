"""Wire types: attrs classes mirroring the OpenAI Responses request schema.

The HTTP layer structures request JSON into them (`convert.py`: one cattrs Converter that
rejects wrong types and unknown fields; the path becomes a 400's `param`), and the turn
service and `translate.py` read them; no actor sees them (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, Literal, Union

import attrs

# A field whose JSON name is not a Python identifier (`async`) is declared under another
# name and marks its JSON name here; the converter and the JSON Schema use the JSON name.
JSON_NAME = "json_name"


def renamed(json_name: str, default: Any = None) -> Any:
    return attrs.field(default=default, metadata={JSON_NAME: json_name})


def json_name(field: attrs.Attribute[Any]) -> str:
    name: str = field.metadata.get(JSON_NAME, field.name)
    return name


# ---- content parts --------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class PromptCacheBreakpoint:
    """An explicit prompt-cache breakpoint on a content part (OpenAI's; no effect here:
    docs/compatibility.md)."""

    mode: Literal["explicit"]
    ttl: Literal["30m", "12h"] | None = None


@attrs.frozen(kw_only=True)
class InputText:
    text: str
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None
    type: Literal["input_text"] = "input_text"


@attrs.frozen(kw_only=True)
class OutputText:
    text: str
    annotations: list[Any] = attrs.Factory(list)
    logprobs: list[Any] | None = None
    type: Literal["output_text"] = "output_text"


@attrs.frozen(kw_only=True)
class Refusal:
    refusal: str
    type: Literal["refusal"] = "refusal"


@attrs.frozen(kw_only=True)
class InputImage:
    detail: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None
    type: Literal["input_image"] = "input_image"


@attrs.frozen(kw_only=True)
class InputFile:
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None
    type: Literal["input_file"] = "input_file"


ContentPart = Union[InputText, OutputText, Refusal, InputImage, InputFile]


# ---- input items ----------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class Message:
    role: Literal["user", "system", "developer", "assistant"]
    content: Union[str, list[ContentPart]]
    # An assistant message's place in its turn (gpt-5.3-codex and later send it back).
    phase: Literal["commentary", "final_answer"] | None = None
    id: str | None = None
    status: str | None = None
    type: Literal["message"] = "message"


@attrs.frozen(kw_only=True)
class Caller:
    """Who made a tool call: the model (`direct`) or a program it ran (`program`, OpenAI's
    programmatic tool calling). Accepted on replayed calls and outputs; no effect here."""

    type: Literal["direct", "program"]
    caller_id: str | None = None


@attrs.frozen(kw_only=True)
class FunctionCall:
    call_id: str
    name: str
    arguments: str
    namespace: str | None = None
    caller: Caller | None = None
    async_: bool | None = renamed("async")
    id: str | None = None
    status: str | None = None
    type: Literal["function_call"] = "function_call"


@attrs.frozen(kw_only=True)
class FunctionCallOutput:
    call_id: str
    output: Union[str, list[ContentPart]]
    # The call's name and namespace, which OpenAI lets an output repeat: the call_id decides.
    name: str | None = None
    namespace: str | None = None
    caller: Caller | None = None
    id: str | None = None
    status: str | None = None
    type: Literal["function_call_output"] = "function_call_output"


@attrs.frozen(kw_only=True)
class CustomToolCall:
    call_id: str
    name: str
    input: str
    namespace: str | None = None
    caller: Caller | None = None
    async_: bool | None = renamed("async")
    id: str | None = None
    status: str | None = None
    type: Literal["custom_tool_call"] = "custom_tool_call"


@attrs.frozen(kw_only=True)
class CustomToolCallOutput:
    call_id: str
    output: Union[str, list[ContentPart]]
    caller: Caller | None = None
    id: str | None = None
    status: str | None = None
    type: Literal["custom_tool_call_output"] = "custom_tool_call_output"


@attrs.frozen(kw_only=True)
class ReasoningText:
    text: str
    type: Literal["reasoning_text", "summary_text"] = "reasoning_text"


@attrs.frozen(kw_only=True)
class ReasoningItem:
    summary: list[ReasoningText] = attrs.Factory(list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    id: str | None = None
    status: str | None = None
    type: Literal["reasoning"] = "reasoning"


@attrs.frozen(kw_only=True)
class CompactionItem:
    encrypted_content: str
    id: str | None = None
    created_by: str | None = None
    type: Literal["compaction"] = "compaction"


@attrs.frozen(kw_only=True)
class AdditionalTools:
    """Tool declarations carried in the input (Codex moves its tool trees here): its tools
    join the request's `tools` for this turn and every later one that replays it."""

    tools: list[dict[str, Any]]
    role: Literal["developer", "system"] | None = None
    id: str | None = None
    type: Literal["additional_tools"] = "additional_tools"


@attrs.frozen(kw_only=True)
class ItemReference:
    """An earlier item by id: resolved against the request's history and the stored
    responses' input and output items before translation (`Turns.prepare`)."""

    id: str
    type: Literal["item_reference"] = "item_reference"


@attrs.frozen(kw_only=True)
class CompactionTrigger:
    """Compacts the history before it into one compaction output item (Codex's compaction);
    only as the last input item. Never stored or rendered."""

    id: str | None = None
    type: Literal["compaction_trigger"] = "compaction_trigger"


@attrs.frozen(kw_only=True)
class McpListTools:
    """A server's tool listing, replayed: a later turn presents these tools without
    listing the server again (docs/mcp.md)."""

    server_label: str
    tools: list[dict[str, Any]]
    error: str | None = None
    id: str | None = None
    type: Literal["mcp_list_tools"] = "mcp_list_tools"


@attrs.frozen(kw_only=True)
class McpCall:
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: Union[dict[str, Any], str, None] = None
    approval_request_id: str | None = None
    status: str | None = None
    id: str | None = None
    type: Literal["mcp_call"] = "mcp_call"


@attrs.frozen(kw_only=True)
class McpApprovalRequest:
    server_label: str
    name: str
    arguments: str
    id: str | None = None
    type: Literal["mcp_approval_request"] = "mcp_approval_request"


@attrs.frozen(kw_only=True)
class McpApprovalResponse:
    """The client's answer to an `mcp_approval_request` of the input or the chain: approved,
    the call runs (once) before the model goes on; denied, the model is told so."""

    approval_request_id: str
    approve: bool
    reason: str | None = None
    id: str | None = None
    type: Literal["mcp_approval_response"] = "mcp_approval_response"


ITEM_TYPES = {
    "message": Message, "function_call": FunctionCall,
    "function_call_output": FunctionCallOutput, "custom_tool_call": CustomToolCall,
    "custom_tool_call_output": CustomToolCallOutput, "reasoning": ReasoningItem,
    "compaction": CompactionItem, "item_reference": ItemReference,
    "additional_tools": AdditionalTools, "compaction_trigger": CompactionTrigger,
    "mcp_list_tools": McpListTools, "mcp_call": McpCall,
    "mcp_approval_request": McpApprovalRequest, "mcp_approval_response": McpApprovalResponse,
}

InputItem = Union[Message, FunctionCall, FunctionCallOutput, CustomToolCall,
                  CustomToolCallOutput, ReasoningItem, CompactionItem, AdditionalTools,
                  ItemReference, CompactionTrigger, McpListTools, McpCall, McpApprovalRequest,
                  McpApprovalResponse]


# ---- the request ----------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class TextFormat:
    type: Literal["text", "json_schema", "json_object"] = "text"
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


@attrs.frozen(kw_only=True)
class TextConfig:
    format: TextFormat | None = None
    verbosity: str | None = None


@attrs.frozen(kw_only=True)
class Reasoning:
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None
    # Which turns' reasoning the model sees (Codex sends it): auto | current_turn | all_turns.
    context: str | None = None
    # OpenAI's execution mode (standard | pro): one mode here.
    mode: str | None = None


@attrs.frozen(kw_only=True)
class ContextManagement:
    type: Literal["compaction"]
    compact_threshold: int


@attrs.frozen(kw_only=True)
class StreamOptions:
    include_obfuscation: bool | None = None


@attrs.frozen(kw_only=True)
class PromptCacheOptions:
    comparison_response_id: str | None = None
    mode: Literal["implicit", "explicit"] | None = None
    prewarm: bool | None = None
    ttl: Literal["30m", "12h"] | None = None


@attrs.frozen(kw_only=True)
class CompactPromptCacheOptions:
    """`prompt_cache_options` as `/v1/responses/compact` takes it (OpenAI's narrower shape)."""

    mode: Literal["implicit", "explicit"] | None = None
    ttl: Literal["30m"] | None = None


@attrs.frozen(kw_only=True)
class AccessPrograms:
    cyber: Literal["standard", "daybreak_blue", "daybreak_red"] | None = None


@attrs.frozen(kw_only=True)
class BackgroundOptions:
    completion_window: Literal["soonest", "2h", "8h"] | None = None
    continuation_id: str | None = None


@attrs.frozen(kw_only=True)
class ImageOptions:
    context_compression: Literal["auto", "enabled", "disabled"] | None = None


@attrs.frozen(kw_only=True)
class ModerationMode:
    mode: Literal["score", "block"]


@attrs.frozen(kw_only=True)
class ModerationPolicy:
    input: ModerationMode | None = None
    output: ModerationMode | None = None


@attrs.frozen(kw_only=True)
class ModerationOptions:
    model: str
    policy: ModerationPolicy | None = None


# A stored prompt's variable: a string, or an input content part.
PromptVariable = Union[str, InputText, InputImage, InputFile]


@attrs.frozen(kw_only=True)
class Prompt:
    """A stored prompt template (`--prompts-dir`) and the values of its variables."""

    id: str
    version: str | None = None
    variables: dict[str, PromptVariable] | None = None


@attrs.frozen(kw_only=True)
class CreateResponse:
    model: str
    input: Union[str, list[InputItem]] = attrs.Factory(list)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Union[str, dict[str, Any], None] = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: Reasoning | None = None
    previous_response_id: str | None = None
    conversation: Union[str, dict[str, Any], None] = None
    context_management: list[ContextManagement] | None = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    background: bool | None = None
    background_options: BackgroundOptions | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    truncation: str | None = None
    metadata: dict[str, str] | None = None
    include: list[str] | None = None
    user: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    safety_identifier: str | None = None
    prompt: Prompt | None = None
    # Accepted and echoed where the response has a field for them; no local effect
    # (docs/compatibility.md).
    moderation: ModerationOptions | None = None
    access_programs: AccessPrograms | None = None
    image: ImageOptions | None = None
    # Codex's per-turn ids (thread, turn, window...): accepted, and of no effect here.
    client_metadata: dict[str, Any] | None = None
    # Extra body fields (not OpenAI's): sampling controls and chat-template arguments.
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: Union[str, list[str], None] = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # How long the model stays loaded once idle after this request (Ollama's keep_alive:
    # seconds, or a duration such as "5m"; -1 never unloads, 0 unloads after it).
    keep_alive: Union[str, float, None] = None


@attrs.frozen(kw_only=True)
class ItemList:
    """Input items alone (what a compaction item keeps), structured like `input`."""

    input: list[InputItem]


@attrs.frozen(kw_only=True)
class CompactRequest:
    """`POST /v1/responses/compact`: the history in `input`, after the `previous_response_id`
    chain if one is named; `conversation` and `stream` are parsed only to be refused by
    name."""

    model: str
    input: Union[str, list[InputItem]] = attrs.Factory(list)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Union[str, dict[str, Any], None] = None
    parallel_tool_calls: bool | None = None
    keep_tokens: int | None = None
    max_output_tokens: int | None = None
    previous_response_id: str | None = None
    conversation: Union[str, dict[str, Any], None] = None
    stream: bool | None = None
    metadata: dict[str, str] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: CompactPromptCacheOptions | None = None
    image: ImageOptions | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class InputTokensRequest(CreateResponse):
    """`POST /v1/responses/input_tokens`: a create's fields (counted as create renders
    them), plus the one field only this endpoint defines."""

    # A model-owned style preset (OpenAI's); there are none here, so it changes no token.
    personality: str | None = None
