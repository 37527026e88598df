"""Anthropic's Messages API as a thin translation onto the Responses one (pure code).

A `POST /v1/messages` body becomes the `CreateResponse` the turn service takes (`to_create`:
`system` → instructions, content blocks → input items, `tools` → function tools, ...; never
stored); its answer is read back from the response object (`message`) or, streamed, from
the response's events (`EventWriter`: Anthropic's `message_start`, `content_block_*`,
`message_delta`, `message_stop`). Errors take Anthropic's shape (`error_body`).
docs/compatibility.md, "Anthropic Messages", says what each field does.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from ..errors import InvalidRequest, renamed
from .convert import structure
from .objects import (CallDeltaEvent, CustomToolCallItem, FunctionCallItem, MessageItem,
                      OutputItemEvent, OutputTextPart, ReasoningItem, ResponseEvent,
                      ResponseObject, StreamEvent, TextDeltaEvent, TextDoneEvent, Usage)
from .wire import CreateResponse

# Server tools (Anthropic runs them; this server cannot): dropped like hosted tools.
SERVER_TOOL_PREFIXES = ("bash_", "code_execution_", "browser_", "memory_", "computer_",
                        "text_editor_", "web_search_", "web_fetch_", "tool_search_")
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 409: "invalid_request_error",
               413: "request_too_large", 415: "invalid_request_error",
               424: "api_error", 429: "rate_limit_error", 503: "overloaded_error"}


def error_body(status: int, message: str) -> dict[str, Any]:
    """An error as Anthropic's API answers one."""
    return {"type": "error",
            "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


@attrs.frozen(kw_only=True)
class MessagesRequest:
    """A Messages body: every field the `anthropic` package's `MessageCreateParams`
    defines, and the sampling fields older releases and clients send."""

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int | None = None      # required by create; count_tokens takes none
    system: Any = None                 # a string or text blocks (`_system` checks it)
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    thinking: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    service_tier: str | None = None
    cache_control: dict[str, Any] | None = None
    container: Any = None
    diagnostics: dict[str, Any] | None = None
    inference_geo: str | None = None
    speed: str | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None
    mcp_servers: list[dict[str, Any]] | None = None
    context_management: dict[str, Any] | None = None


@attrs.frozen
class Translated:
    create: CreateResponse
    dropped_tools: tuple[str, ...]
    origins: list[Origin] = attrs.Factory(list)

    def named(self, exc: InvalidRequest) -> InvalidRequest:
        """The error, naming the Messages field its `param` came from."""
        return renamed(exc, anthropic_param(exc.param, self.origins))


def _blob_url(source: Any, where: str, kinds: tuple[str, ...]) -> tuple[str, str]:
    """(kind, URL) of an image or document source: a data URL of base64 data, or a URL."""
    if not isinstance(source, dict):
        raise InvalidRequest(f"'{where}' must be an object", param=where)
    kind = source.get("type")
    if kind == "base64" and "base64" in kinds:
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not isinstance(data, str):
            raise InvalidRequest(f"'{where}' needs media_type and data", param=where)
        return "base64", f"data:{media};base64,{data}"
    if kind == "url" and "url" in kinds and isinstance(source.get("url"), str):
        return "url", source["url"]
    if kind == "text" and "text" in kinds and isinstance(source.get("data"), str):
        return "text", source["data"]
    raise InvalidRequest(f"'{where}.type' must be one of {', '.join(kinds)}",
                         param=f"{where}.type")


def _user_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise InvalidRequest(f"'{where}.text' must be a string", param=f"{where}.text")
        return {"type": "input_text", "text": block["text"]}
    if kind == "image":
        _, url = _blob_url(block.get("source"), f"{where}.source", ("base64", "url"))
        return {"type": "input_image", "image_url": url}
    if kind == "document":
        how, value = _blob_url(block.get("source"), f"{where}.source",
                               ("base64", "url", "text"))
        if how == "text":
            return {"type": "input_text", "text": value}
        name = block.get("title") if isinstance(block.get("title"), str) else "document.pdf"
        return {"type": "input_file", "file_url": value} if how == "url" else \
            {"type": "input_file", "file_data": value, "filename": name}
    raise InvalidRequest(f"'{where}.type' {kind!r} is not taken here (text, image, document, "
                         "tool_use, tool_result, thinking)", param=f"{where}.type")


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise InvalidRequest(f"'{where}.tool_use_id' is required", param=f"{where}.tool_use_id")
    content = block.get("content", "")
    if isinstance(content, list):
        output: Any = [_user_part(b, f"{where}.content[{j}]") if isinstance(b, dict)
                       else _not_object(f"{where}.content[{j}]") for j, b in enumerate(content)]
        if block.get("is_error"):
            output = [{"type": "input_text", "text": "error: "}, *output]
    elif isinstance(content, str):
        output = f"error: {content}" if block.get("is_error") else content
    else:
        raise InvalidRequest(f"'{where}.content' must be a string or blocks",
                             param=f"{where}.content")
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def _not_object(where: str) -> dict[str, Any]:
    raise InvalidRequest(f"'{where}' must be an object", param=where)


# Where an input item came from: its message (and block) path, and for a message item made
# of blocks, each content part's block index.
Origin = tuple[str, "list[int] | None"]


def _messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Origin]]:
    items: list[dict[str, Any]] = []
    origins: list[Origin] = []
    if not messages:
        raise InvalidRequest("messages: at least one message is required", param="messages")
    for i, msg in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(msg, dict):
            raise InvalidRequest(f"{where}: must be an object", param=where)
        role = msg.get("role")
        if role not in ("user", "assistant", "system"):
            raise InvalidRequest(f"{where}.role: must be user, assistant or system",
                                 param=f"{where}.role")
        content = msg.get("content")
        if role == "system":   # a mid-conversation system message (Claude Code sends them)
            items.append({"role": "system",
                          "content": _system(content if isinstance(content, (str, list))
                                             else None) or ""})
            origins.append((where, None))
            continue
        if isinstance(content, str):
            items.append({"role": role, "content": content})
            origins.append((where, None))
            continue
        if not isinstance(content, list):
            raise InvalidRequest(f"{where}.content: must be a string or a list of blocks",
                                 param=f"{where}.content")
        parts: list[dict[str, Any]] = []
        blocks: list[int] = []

        def flush() -> None:
            if parts:
                items.append({"role": role, "content": list(parts)})
                origins.append((where, list(blocks)))
                parts.clear()
                blocks.clear()

        def alone(item: dict[str, Any], at: str) -> None:
            flush()
            items.append(item)
            origins.append((at, None))

        for j, block in enumerate(content):
            at = f"{where}.content.{j}"
            if not isinstance(block, dict):
                raise InvalidRequest(f"{at}: must be an object", param=at)
            kind = block.get("type")
            if role == "assistant":
                if kind == "text":
                    parts.append({"type": "output_text", "text": block.get("text")})
                    blocks.append(j)
                elif kind == "tool_use":
                    alone({"type": "function_call", "call_id": block.get("id"),
                           "name": block.get("name"),
                           "arguments": json.dumps(block.get("input", {}))}, at)
                elif kind == "thinking":
                    alone({"type": "reasoning", "summary": [], "content": [
                        {"type": "reasoning_text", "text": block.get("thinking")}]}, at)
                elif kind == "redacted_thinking":
                    continue   # encrypted elsewhere: nothing a local model can read
                else:
                    raise InvalidRequest(f"{at}.type: {kind!r} is not taken in an assistant "
                                         "message (text, tool_use, thinking)",
                                         param=f"{at}.type")
            elif kind == "tool_result":
                alone(_tool_result(block, at), at)
            else:
                parts.append(_user_part(block, at))
                blocks.append(j)
        flush()
    return items, origins


# The create's fields, named as the Messages request wrote them.
RENAMED = {"input": "messages", "max_output_tokens": "max_tokens", "instructions": "system",
           "stop": "stop_sequences", "text.format": "output_config.format",
           "reasoning.effort": "output_config.effort", "reasoning": "output_config",
           "parallel_tool_calls": "tool_choice", "chat_template_kwargs": "thinking",
           "user": "metadata.user_id", "text": "output_config"}
FIELD_NAMES = {".arguments": ".input", ".output": ".content", ".call_id": ".id"}


def _dotted(path: str) -> str:
    return re.sub(r"\[(\d+)\]", r".\1", path)


def anthropic_param(param: str | None, origins: list[Origin]) -> str | None:
    """A translated request's `param` as the Messages field it came from."""
    if param is None:
        return None
    found = re.match(r"input\[(\d+)\](.*)", param)
    if found:
        k, rest = int(found.group(1)), found.group(2)
        if k >= len(origins):
            return "messages"
        where, blocks = origins[k]
        part = re.match(r"\.content\[(\d+)\](.*)", rest)
        if part is not None and blocks is not None and int(part.group(1)) < len(blocks):
            return f"{where}.content.{blocks[int(part.group(1))]}" + _dotted(part.group(2))
        for ours, theirs in FIELD_NAMES.items():
            if rest.startswith(ours):
                rest = theirs + rest[len(ours):]
        return where + _dotted(rest)
    for ours, theirs in RENAMED.items():
        if param == ours or param.startswith(ours + "."):
            return theirs + _dotted(param[len(ours):])
    return _dotted(param)


def _tools(tools: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], list[str]]:
    kept, dropped = [], []
    for i, tool in enumerate(tools or []):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise InvalidRequest(f"{where}: must be an object", param=where)
        kind = tool.get("type")
        if isinstance(kind, str) and kind.startswith(SERVER_TOOL_PREFIXES):
            dropped.append(kind)
            continue
        if kind not in (None, "custom"):
            raise InvalidRequest(f"{where}.type: unknown tool type {kind!r}",
                                 param=f"{where}.type")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise InvalidRequest(f"{where}.input_schema: an object is required",
                                 param=f"{where}.input_schema")
        kept.append({"type": "function", "name": tool.get("name"),
                     "description": tool.get("description"), "parameters": schema,
                     **({"strict": tool["strict"]} if isinstance(tool.get("strict"), bool)
                        else {})})
    return kept, dropped


def _tool_choice(choice: dict[str, Any] | None) -> tuple[Any, bool | None]:
    if choice is None:
        return None, None
    kind = choice.get("type")
    parallel = None if choice.get("disable_parallel_tool_use") is None \
        else not choice["disable_parallel_tool_use"]
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", parallel
    if kind == "tool":
        return {"type": "function", "name": choice.get("name")}, parallel
    raise InvalidRequest("tool_choice.type: must be auto, any, tool or none",
                         param="tool_choice.type")


def _system(system: Any) -> str | None:
    if system is None or isinstance(system, str):
        return system
    if not isinstance(system, list):
        raise InvalidRequest("system: must be a string or a list of text blocks",
                             param="system")
    texts = []
    for i, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text" or \
                not isinstance(block.get("text"), str):
            raise InvalidRequest(f"system.{i}: must be a text block", param=f"system.{i}")
        texts.append(block["text"])
    return "\n\n".join(texts)


def to_create(body: Any, *, counting: bool = False) -> Translated:
    """A Messages body as the `CreateResponse` it runs as (`counting`: a count_tokens body,
    which takes no max_tokens); a 400 names the field as Anthropic's API does
    (`messages.2.content`)."""
    req: MessagesRequest = structure(body, MessagesRequest)
    if not counting and req.max_tokens is None:
        raise InvalidRequest("max_tokens: Field required", param="max_tokens")
    if req.max_tokens is not None and req.max_tokens < 1:
        raise InvalidRequest("max_tokens: must be at least 1", param="max_tokens")
    tools, dropped = _tools(req.tools)
    choice, parallel = _tool_choice(req.tool_choice)
    kwargs: dict[str, Any] = {}
    thinking = (req.thinking or {}).get("type")
    if thinking in ("enabled", "adaptive"):
        kwargs["enable_thinking"] = True
    elif thinking == "disabled":
        kwargs["enable_thinking"] = False
    elif thinking is not None:
        raise InvalidRequest("thinking.type: must be enabled, adaptive or disabled",
                             param="thinking.type")
    output = req.output_config or {}
    fmt = output.get("format")
    text = None
    if isinstance(fmt, dict):
        if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
            raise InvalidRequest("output_config.format: a json_schema with a schema is "
                                 "required", param="output_config.format")
        text = {"format": {"type": "json_schema", "name": "output", "schema": fmt["schema"],
                           "strict": True}}
    user = (req.metadata or {}).get("user_id")
    items, origins = _messages(req.messages)
    create = {
        "model": req.model, "input": items, "store": False,
        "instructions": _system(req.system), "tools": tools or None, "tool_choice": choice,
        "parallel_tool_calls": parallel, "max_output_tokens": req.max_tokens,
        "stop": req.stop_sequences or None, "stream": req.stream,
        "temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k,
        "text": text, "user": user if isinstance(user, str) else None,
        "reasoning": {"effort": output["effort"]} if isinstance(output.get("effort"), str)
        else None,
        "chat_template_kwargs": kwargs or None,
    }
    try:
        translated: CreateResponse = structure(
            {k: v for k, v in create.items() if v is not None}, CreateResponse)
    except InvalidRequest as exc:
        raise renamed(exc, anthropic_param(exc.param, origins)) from None
    return Translated(translated, tuple(dropped), origins)


# ---- answers ----------------------------------------------------------------------------

def message_id(response_id: str) -> str:
    return "msg_" + response_id.removeprefix("resp_")


def anthropic_usage(used: Usage | None) -> dict[str, Any]:
    """Anthropic counts cached prompt tokens apart from `input_tokens`."""
    if used is None:
        return {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0}
    return {"input_tokens": used.input_tokens - used.cached_tokens,
            "output_tokens": used.output_tokens,
            "cache_read_input_tokens": used.cached_tokens, "cache_creation_input_tokens": 0}


def stop_reason(obj: ResponseObject, stop_sequence: str | None) -> str:
    if obj.status == "incomplete":
        return "max_tokens"
    if stop_sequence is not None:
        return "stop_sequence"
    if any(isinstance(i, (FunctionCallItem, CustomToolCallItem)) for i in obj.output):
        return "tool_use"
    return "end_turn"


def _input(arguments: str) -> Any:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def _tool_name(item: FunctionCallItem | CustomToolCallItem) -> str:
    return f"{item.namespace}.{item.name}" if item.namespace else item.name


def message(obj: ResponseObject, stop_sequence: str | None = None) -> dict[str, Any]:
    """The finished response as an Anthropic `message`."""
    content: list[dict[str, Any]] = []
    for item in obj.output:
        if isinstance(item, ReasoningItem):
            content.append({"type": "thinking", "signature": "",
                            "thinking": "\n".join(p.text for p in item.content or [])})
        elif isinstance(item, MessageItem):
            text = "".join(p.text for p in item.content if isinstance(p, OutputTextPart))
            if text:
                content.append({"type": "text", "text": text})
        elif isinstance(item, FunctionCallItem):
            content.append({"type": "tool_use", "id": item.call_id, "name": _tool_name(item),
                            "input": _input(item.arguments)})
        elif isinstance(item, CustomToolCallItem):
            content.append({"type": "tool_use", "id": item.call_id, "name": _tool_name(item),
                            "input": {"input": item.input}})
    return {"id": message_id(obj.id), "type": "message", "role": "assistant",
            "model": obj.model, "content": content,
            "stop_reason": stop_reason(obj, stop_sequence), "stop_sequence": stop_sequence,
            "usage": anthropic_usage(obj.usage)}


class EventWriter:
    """A response's stream events as Anthropic's stream: `message_start`, a `ping`, each
    block's `content_block_start` / `_delta` / `_stop`, then `message_delta` (stop reason
    and usage) and `message_stop`."""

    def __init__(self) -> None:
        self._index = -1
        self._open: str | None = None       # the open block's kind
        self._calls: set[str] = set()

    def _start(self, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        out = self._stop()
        self._index += 1
        self._open = block["type"]
        out.append(("content_block_start", {"type": "content_block_start",
                                            "index": self._index, "content_block": block}))
        return out

    def _stop(self) -> list[tuple[str, dict[str, Any]]]:
        if self._open is None:
            return []
        out = []
        if self._open == "thinking":
            out.append(("content_block_delta", self._delta({"type": "signature_delta",
                                                            "signature": ""})))
        self._open = None
        out.append(("content_block_stop", {"type": "content_block_stop",
                                           "index": self._index}))
        return out

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self._index, "delta": delta}

    def feed(self, event: StreamEvent, stop_sequence: str | None = None
             ) -> list[tuple[str, dict[str, Any]]]:
        """(event name, data) of what one event makes."""
        out: list[tuple[str, dict[str, Any]]] = []
        if isinstance(event, ResponseEvent):
            obj = event.response
            if event.type == "response.created":
                out.append(("message_start", {"type": "message_start", "message": {
                    "id": message_id(obj.id), "type": "message", "role": "assistant",
                    "model": obj.model, "content": [], "stop_reason": None,
                    "stop_sequence": None, "usage": anthropic_usage(None)}}))
                out.append(("ping", {"type": "ping"}))
            elif event.type in ("response.completed", "response.incomplete"):
                out += self._stop()
                out.append(("message_delta", {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason(obj, stop_sequence),
                              "stop_sequence": stop_sequence},
                    "usage": anthropic_usage(obj.usage)}))
                out.append(("message_stop", {"type": "message_stop"}))
            elif event.type == "response.failed":
                error = obj.error
                out.append(("error", error_body(500, error.message if error else "failed")))
        elif isinstance(event, TextDeltaEvent):
            if event.type == "response.output_text.delta":
                if self._open != "text":
                    out += self._start({"type": "text", "text": ""})
                out.append(("content_block_delta",
                            self._delta({"type": "text_delta", "text": event.delta})))
            elif event.type == "response.reasoning_text.delta":
                if self._open != "thinking":
                    out += self._start({"type": "thinking", "thinking": "", "signature": ""})
                out.append(("content_block_delta",
                            self._delta({"type": "thinking_delta", "thinking": event.delta})))
        elif isinstance(event, TextDoneEvent):
            out += self._stop()
        elif isinstance(event, OutputItemEvent) and event.type == "response.output_item.added" \
                and isinstance(event.item, (FunctionCallItem, CustomToolCallItem)):
            self._calls.add(event.item.id)
            out += self._start({"type": "tool_use", "id": event.item.call_id,
                                "name": _tool_name(event.item), "input": {}})
        elif isinstance(event, OutputItemEvent) and event.type == "response.output_item.done" \
                and event.item.id in self._calls:
            out += self._stop()
        elif isinstance(event, CallDeltaEvent) and event.item_id in self._calls:
            out.append(("content_block_delta", self._delta({"type": "input_json_delta",
                                                            "partial_json": event.delta})))
        return out
