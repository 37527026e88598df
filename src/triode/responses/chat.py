"""OpenAI's Chat Completions API as a thin translation onto the Responses one (pure code).

A `POST /v1/chat/completions` body becomes the `CreateResponse` the turn service takes
(`to_create`: messages → input items, `response_format` → `text.format`, `max_tokens` →
`max_output_tokens`, ...; never stored), so it runs on the same preparation, model actor,
prompt cache, tenants and limits. Its answer is read back from the response object
(`completion`) or, streamed, from the response's events (`ChunkWriter`). A 400 names the
Chat Completions field (`messages[2].content`), not the Responses one it became
(`chat_param`). docs/compatibility.md, "Chat Completions", says what each field does.
"""

from __future__ import annotations

import json
import re
from typing import Any, Union

import attrs

from ..errors import InvalidRequest, renamed
from .objects import (CallDeltaEvent, FunctionCallItem, CustomToolCallItem, MessageItem,
                      OutputItemEvent, OutputTextPart, ReasoningItem, RefusalPart,
                      ResponseEvent, ResponseObject, StreamEvent, TextDeltaEvent, Usage)
from .wire import CreateResponse
from .convert import structure

ROLES = ("system", "developer", "user", "assistant", "tool", "function")


@attrs.frozen(kw_only=True)
class ChatStreamOptions:
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


@attrs.frozen(kw_only=True)
class ChatRequest:
    """A Chat Completions body: every field the `openai` package's `CompletionCreateParams`
    defines, plus the extra sampling fields `/v1/responses` takes."""

    model: str
    messages: list[dict[str, Any]]
    audio: dict[str, Any] | None = None
    frequency_penalty: float | None = None
    function_call: Union[str, dict[str, Any], None] = None
    functions: list[dict[str, Any]] | None = None
    logit_bias: dict[str, Any] | None = None
    logprobs: bool | None = None
    max_completion_tokens: int | None = None
    max_tokens: int | None = None
    metadata: dict[str, str] | None = None
    modalities: list[str] | None = None
    moderation: dict[str, Any] | None = None
    n: int | None = None
    parallel_tool_calls: bool | None = None
    prediction: dict[str, Any] | None = None
    presence_penalty: float | None = None
    prompt_cache_key: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    prompt_cache_retention: str | None = None
    reasoning_effort: str | None = None
    response_format: dict[str, Any] | None = None
    safety_identifier: str | None = None
    seed: int | None = None
    service_tier: str | None = None
    stop: Union[str, list[str], None] = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: ChatStreamOptions | None = None
    temperature: float | None = None
    tool_choice: Union[str, dict[str, Any], None] = None
    tools: list[dict[str, Any]] | None = None
    top_logprobs: int | None = None
    top_p: float | None = None
    user: str | None = None
    verbosity: str | None = None
    web_search_options: dict[str, Any] | None = None
    # Extra body fields (not OpenAI's), as /v1/responses takes them.
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    keep_alive: Union[str, float, None] = None


# Where a Responses field of the translated request came from, for a 400's `param`.
RENAMED = {"input": "messages", "max_output_tokens": "max_completion_tokens",
           "text.format": "response_format",
           "reasoning.effort": "reasoning_effort", "text.verbosity": "verbosity"}


@attrs.frozen
class Translated:
    """The request as the turn service takes it, and where each input item came from (the
    message index of `input[i]`), for naming fields in a 400."""

    create: CreateResponse
    origins: list[str]
    include_usage: bool
    names: dict[str, str] = attrs.Factory(lambda: dict(RENAMED))   # its fields' names

    def param(self, param: str | None) -> str | None:
        return chat_param(param, self.origins, self.names)

    def named(self, exc: InvalidRequest) -> InvalidRequest:
        """The error, naming the Chat Completions field its `param` came from."""
        return renamed(exc, self.param(exc.param))


def chat_param(param: str | None, origins: list[str],
               names: dict[str, str] = RENAMED) -> str | None:
    """A translated request's `param` as the Chat Completions field it came from."""
    if param is None:
        return None
    found = re.match(r"input\[(\d+)\](.*)", param)
    if found:
        i, rest = int(found.group(1)), found.group(2)
        where = origins[i] if i < len(origins) else "messages"
        return where + (".content" + rest[len(".output"):] if rest.startswith(".output")
                        else rest)
    for ours, theirs in names.items():
        if param == ours or param.startswith(ours + "."):
            return theirs + param[len(ours):]
    return param


def _text_of(content: Any, param: str, *, allow: tuple[str, ...] = ("text",)) -> str:
    """A content that must be text: a string, or parts of `allow` types joined."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise InvalidRequest(f"'{param}' must be a string or an array of content parts",
                             param=param)
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allow:
            raise InvalidRequest(f"'{param}[{j}]' must be a part of type "
                                 f"{' or '.join(allow)}", param=f"{param}[{j}]")
        key = "refusal" if kind == "refusal" else "text"
        if not isinstance(part.get(key), str):
            raise InvalidRequest(f"'{param}[{j}].{key}' must be a string",
                                 param=f"{param}[{j}].{key}")
        out.append(part[key])
    return "".join(out)


def _user_parts(content: Any, param: str) -> Any:
    """A user message's content as Responses input parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"'{param}' must be a string or an array of content parts",
                             param=param)
    parts = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append({"type": "input_text", "text": part.get("text")})
        elif kind == "image_url":
            image = part.get("image_url")
            if not isinstance(image, dict) or not isinstance(image.get("url"), str):
                raise InvalidRequest(f"'{where}.image_url.url' is required",
                                     param=f"{where}.image_url.url")
            parts.append({"type": "input_image", "image_url": image["url"],
                          **({"detail": image["detail"]} if image.get("detail") else {})})
        elif kind == "file":
            file = part.get("file")
            if not isinstance(file, dict):
                raise InvalidRequest(f"'{where}.file' must be an object", param=f"{where}.file")
            parts.append({"type": "input_file", **{k: v for k, v in file.items()
                                                   if k in ("file_data", "file_id",
                                                            "filename")}})
        elif kind == "input_audio":
            raise InvalidRequest("audio input is not supported: this server serves text "
                                 "(and image) models", param=where)
        else:
            raise InvalidRequest(f"'{where}.type' must be text, image_url or file",
                                 param=f"{where}.type")
    return parts


def _messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The messages as Responses input items, and each item's message path."""
    items: list[dict[str, Any]] = []
    origins: list[str] = []
    if not messages:
        raise InvalidRequest("'messages' must hold at least one message", param="messages")
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise InvalidRequest(f"'{where}' must be an object", param=where)
        role = msg.get("role")
        if role not in ROLES:
            raise InvalidRequest(f"'{where}.role' must be one of {', '.join(ROLES)}",
                                 param=f"{where}.role")
        content = msg.get("content")

        def add(item: dict[str, Any], path: str = where) -> None:
            items.append(item)
            origins.append(path)

        if role in ("system", "developer"):
            add({"role": role, "content": _text_of(content, f"{where}.content")})
        elif role == "user":
            add({"role": "user", "content": _user_parts(content, f"{where}.content")})
        elif role == "assistant":
            reasoning = msg.get("reasoning_content", msg.get("reasoning"))
            if isinstance(reasoning, str) and reasoning:
                add({"type": "reasoning", "summary": [],
                     "content": [{"type": "reasoning_text", "text": reasoning}]})
            for field in ("function_call", "audio"):
                if msg.get(field) is not None:
                    raise InvalidRequest(
                        f"'{where}.{field}' is not supported: " + (
                            "use tool_calls (the deprecated function calling is not served)"
                            if field == "function_call" else "no audio is generated here"),
                        param=f"{where}.{field}")
            text = _text_of(content, f"{where}.content", allow=("text", "refusal"))
            calls = msg.get("tool_calls") or []
            if not isinstance(calls, list):
                raise InvalidRequest(f"'{where}.tool_calls' must be an array",
                                     param=f"{where}.tool_calls")
            refusal = msg.get("refusal")
            if isinstance(refusal, str) and refusal:
                add({"role": "assistant", "content": [
                    *([{"type": "output_text", "text": text}] if text else []),
                    {"type": "refusal", "refusal": refusal}]})
            elif text or not calls:
                add({"role": "assistant", "content": text})
            for j, call in enumerate(calls):
                add(_call(call, f"{where}.tool_calls[{j}]"), f"{where}.tool_calls[{j}]")
        elif role == "tool":
            call_id = msg.get("tool_call_id")
            if not isinstance(call_id, str):
                raise InvalidRequest(f"'{where}.tool_call_id' is required",
                                     param=f"{where}.tool_call_id")
            add({"type": "function_call_output", "call_id": call_id,
                 "output": _text_of(content, f"{where}.content")})
        else:
            raise InvalidRequest("'function' messages (the deprecated function calling) are "
                                 "not supported: use tools and 'tool' messages", param=where)
    return items, origins


def _call(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise InvalidRequest(f"'{where}' must be an object", param=where)
    if call.get("type", "function") == "custom":
        custom = call.get("custom") or {}
        return {"type": "custom_tool_call", "call_id": call.get("id"),
                "name": custom.get("name"), "input": custom.get("input")}
    fn = call.get("function")
    if not isinstance(fn, dict):
        raise InvalidRequest(f"'{where}.function' must be an object", param=f"{where}.function")
    arguments = fn.get("arguments")
    if isinstance(arguments, dict):   # some clients send the object itself
        arguments = json.dumps(arguments)
    return {"type": "function_call", "call_id": call.get("id"), "name": fn.get("name"),
            "arguments": arguments}


def _tools(req: ChatRequest) -> list[dict[str, Any]] | None:
    tools = list(req.tools or [])
    for i, fn in enumerate(req.functions or []):   # the deprecated `functions`
        tools.append({"type": "function", "function": fn})
    for i, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type") == "custom" and \
                isinstance(tool.get("custom"), dict):
            tools[i] = {"type": "custom", **tool["custom"]}
    return tools or None


def _tool_choice(req: ChatRequest) -> Any:
    choice = req.tool_choice
    if choice is None and req.function_call is not None:   # the deprecated function_call
        fc = req.function_call
        choice = fc if isinstance(fc, str) else {"type": "function", "name": fc.get("name")}
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools" and \
            isinstance(choice.get("allowed_tools"), dict):
        inner = choice["allowed_tools"]
        choice = {"type": "allowed_tools", "mode": inner.get("mode"),
                  "tools": inner.get("tools")}
    if isinstance(choice, dict) and choice.get("type") == "custom" and \
            isinstance(choice.get("custom"), dict):
        choice = {"type": "custom", "name": choice["custom"].get("name")}
    return choice


def _text_format(fmt: dict[str, Any] | None) -> dict[str, Any] | None:
    if fmt is None:
        return None
    kind = fmt.get("type")
    if kind == "json_schema":
        schema = fmt.get("json_schema")
        if not isinstance(schema, dict):
            raise InvalidRequest("'response_format.json_schema' is required",
                                 param="response_format.json_schema")
        return {"format": {"type": "json_schema",
                           **{k: v for k, v in schema.items()
                              if k in ("name", "schema", "strict", "description")}}}
    if kind in ("text", "json_object"):
        return {"format": {"type": kind}}
    raise InvalidRequest("'response_format.type' must be text, json_object or json_schema",
                         param="response_format.type")


def to_create(body: Any) -> Translated:
    """A Chat Completions body as the `CreateResponse` it runs as; a 400 names the field."""
    req: ChatRequest = structure(body, ChatRequest)
    if req.n not in (None, 1):
        raise InvalidRequest("n must be 1: this server generates one choice per request "
                             "(send the request again for another)", param="n")
    if req.logit_bias:
        raise InvalidRequest("logit_bias is not supported", param="logit_bias")
    if req.modalities is not None and [m for m in req.modalities if m != "text"]:
        raise InvalidRequest("only the text modality is served", param="modalities")
    if req.audio is not None:
        raise InvalidRequest("audio output is not supported", param="audio")
    if req.top_logprobs is not None and not req.logprobs:
        raise InvalidRequest("top_logprobs needs logprobs: true", param="top_logprobs")
    if req.max_tokens is not None and req.max_completion_tokens is not None:
        raise InvalidRequest("give max_completion_tokens or max_tokens, not both",
                             param="max_tokens")
    items, origins = _messages(req.messages)
    create: dict[str, Any] = {
        "model": req.model, "input": items, "store": False,
        "tools": _tools(req), "tool_choice": _tool_choice(req),
        "parallel_tool_calls": req.parallel_tool_calls,
        "text": _text_format(req.response_format),
        "max_output_tokens": req.max_completion_tokens if req.max_tokens is None
        else req.max_tokens,
        "stream": req.stream, "temperature": req.temperature, "top_p": req.top_p,
        "seed": req.seed, "stop": req.stop, "metadata": req.metadata,
        "presence_penalty": req.presence_penalty, "frequency_penalty": req.frequency_penalty,
        "top_logprobs": req.top_logprobs if req.logprobs else None,
        "include": ["message.output_text.logprobs"] if req.logprobs else None,
        "reasoning": {"effort": req.reasoning_effort} if req.reasoning_effort else None,
        "user": req.user, "safety_identifier": req.safety_identifier,
        "service_tier": req.service_tier, "prompt_cache_key": req.prompt_cache_key,
        "prompt_cache_retention": req.prompt_cache_retention,
        "top_k": req.top_k, "min_p": req.min_p, "repetition_penalty": req.repetition_penalty,
        "chat_template_kwargs": req.chat_template_kwargs, "keep_alive": req.keep_alive,
    }
    if req.verbosity is not None:
        create["text"] = {**(create["text"] or {}), "verbosity": req.verbosity}
    create = {k: v for k, v in create.items() if v is not None}
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    names = {**RENAMED, **({"max_output_tokens": "max_tokens"}
                           if req.max_tokens is not None else {})}
    try:
        translated: CreateResponse = structure(create, CreateResponse)
    except InvalidRequest as exc:
        raise renamed(exc, chat_param(exc.param, origins, names)) from None
    return Translated(translated, origins, include_usage, names)


# ---- answers ----------------------------------------------------------------------------

def completion_id(response_id: str) -> str:
    return "chatcmpl-" + response_id.removeprefix("resp_")


def chat_usage(used: Usage | None) -> dict[str, Any] | None:
    if used is None:
        return None
    return {"prompt_tokens": used.input_tokens, "completion_tokens": used.output_tokens,
            "total_tokens": used.total_tokens,
            "prompt_tokens_details": {"cached_tokens": used.cached_tokens,
                                      "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": used.output_tokens_details.reasoning_tokens,
                "audio_tokens": 0, "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0}}


def _tool_call(item: FunctionCallItem | CustomToolCallItem) -> dict[str, Any]:
    name = f"{item.namespace}.{item.name}" if item.namespace else item.name
    if isinstance(item, CustomToolCallItem):
        return {"id": item.call_id, "type": "custom",
                "custom": {"name": name, "input": item.input}}
    return {"id": item.call_id, "type": "function",
            "function": {"name": name, "arguments": item.arguments}}


def finish_reason(obj: ResponseObject) -> str:
    if obj.status == "incomplete":
        return "length"
    if any(isinstance(i, (FunctionCallItem, CustomToolCallItem)) for i in obj.output):
        return "tool_calls"
    return "stop"


def completion(obj: ResponseObject, *, logprobs: bool = False) -> dict[str, Any]:
    """The finished response as a `chat.completion` (`logprobs`: the request asked)."""
    text, refusal, reasoning, entries = [], [], [], []
    calls = []
    for item in obj.output:
        if isinstance(item, MessageItem):
            for part in item.content:
                if isinstance(part, OutputTextPart):
                    text.append(part.text)
                    entries += part.logprobs or []
                elif isinstance(part, RefusalPart):
                    refusal.append(part.refusal)
        elif isinstance(item, ReasoningItem):
            reasoning += [p.text for p in item.content or []]
        elif isinstance(item, (FunctionCallItem, CustomToolCallItem)):
            calls.append(_tool_call(item))
    message: dict[str, Any] = {"role": "assistant",
                               "content": "".join(text) if text or not calls else None,
                               "refusal": "".join(refusal) or None, "annotations": []}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = "\n".join(reasoning)
    return {"id": completion_id(obj.id), "object": "chat.completion",
            "created": obj.created_at, "model": obj.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(obj),
                         "logprobs": {"content": entries, "refusal": None}
                         if logprobs else None}],
            "usage": chat_usage(obj.usage), "service_tier": obj.service_tier,
            "system_fingerprint": None}


class ChunkWriter:
    """A response's stream events as `chat.completion.chunk`s: the role first, then content,
    reasoning and tool-call deltas, the finish reason, the usage chunk when asked, and the
    `[DONE]` terminator (`done`)."""

    def __init__(self, *, include_usage: bool, logprobs: bool) -> None:
        self._include_usage = include_usage
        self._logprobs = logprobs
        self._base: dict[str, Any] | None = None
        self._calls: dict[str, int] = {}     # item id → tool_calls index

    def _chunk(self, delta: dict[str, Any], finish: str | None = None,
               logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        assert self._base is not None
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish,
                                  "logprobs": {"content": logprobs, "refusal": None}
                                  if self._logprobs and logprobs is not None else None}
        return {**self._base, "choices": [choice],
                **({"usage": None} if self._include_usage else {})}

    def feed(self, event: StreamEvent) -> list[dict[str, Any]]:
        """The chunks one event makes (often none)."""
        out: list[dict[str, Any]] = []
        if isinstance(event, ResponseEvent):
            obj = event.response
            if event.type == "response.created":
                self._base = {"id": completion_id(obj.id), "object": "chat.completion.chunk",
                              "created": obj.created_at, "model": obj.model,
                              "service_tier": obj.service_tier, "system_fingerprint": None}
                out.append(self._chunk({"role": "assistant", "content": "",
                                        "refusal": None}))
            elif event.type in ("response.completed", "response.incomplete"):
                out.append(self._chunk({}, finish_reason(obj)))
                if self._include_usage:
                    out.append({**self._chunk({}), "choices": [],
                                "usage": chat_usage(obj.usage)})
        elif isinstance(event, TextDeltaEvent):
            if event.type == "response.output_text.delta":
                out.append(self._chunk({"content": event.delta}, logprobs=event.logprobs or []))
            elif event.type == "response.reasoning_text.delta":
                out.append(self._chunk({"reasoning_content": event.delta}))
        elif isinstance(event, OutputItemEvent) and event.type == "response.output_item.added" \
                and isinstance(event.item, (FunctionCallItem, CustomToolCallItem)):
            index = self._calls[event.item.id] = len(self._calls)
            call = _tool_call(event.item)
            if call["type"] == "function":
                call["function"]["arguments"] = ""
            else:
                call["custom"]["input"] = ""
            out.append(self._chunk({"tool_calls": [{"index": index, **call}]}))
        elif isinstance(event, CallDeltaEvent) and event.item_id in self._calls:
            index = self._calls[event.item_id]
            delta = {"custom": {"input": event.delta}} \
                if event.type == "response.custom_tool_call_input.delta" \
                else {"function": {"arguments": event.delta}}
            out.append(self._chunk({"tool_calls": [{"index": index, **delta}]}))
        return out
