"""Input items: wire types → canonical items (`objects.Item`) → chat-template messages.

Canonical items are what a stored response keeps as its input and what history replays, so
input from a request, from a `previous_response_id` chain and from a conversation all render
through the same `chat_messages`.

Tool calls render as the chat template expects them: an assistant message with `tool_calls`
(consecutive calls, and calls right after the assistant's text, merge into one assistant
turn) followed by `tool` messages. A custom tool is presented to the template as a function
with one string parameter, `input`; a namespaced function as `namespace.name`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

from ..errors import InvalidRequest
from ..model.decoding import is_data_url
from . import compaction, wire
from .ids import new_id
from .objects import (AdditionalToolsItem, CompactionItem, ContentPart, CustomToolCallItem,
                      CustomToolCallOutputItem, FunctionCallItem, FunctionCallOutputItem,
                      InputImagePart, InputTextPart, Item, McpApprovalRequestItem,
                      McpApprovalResponseItem, McpCallItem, McpListToolsItem, MessageItem,
                      OutputTextPart, ReasoningItem, ReasoningTextPart, RefusalPart,
                      SummaryTextPart)
from .output import decrypt_reasoning

CUSTOM_INPUT = "input"


def chat_tool_name(name: str, namespace: str | None) -> str:
    return f"{namespace}.{name}" if namespace else name


def _part(part: wire.ContentPart, param: str) -> ContentPart:
    match part:
        case wire.InputText(text=t):
            return InputTextPart(text=t)
        case wire.OutputText(text=t):
            return OutputTextPart(text=t)
        case wire.Refusal(refusal=t):
            return RefusalPart(refusal=t)
        case wire.InputImage(image_url=str(url)) if is_data_url(url):
            return InputImagePart(image_url=url, detail=part.detail or "auto")
        case wire.InputImage():
            # The turn service's media step (service/media.py) checks every image and makes
            # its URL a data URL, or refuses it for a model that takes no images.
            raise InvalidRequest("this model does not take image input", param=param)
        case wire.InputFile():
            raise InvalidRequest("an input_file reached translation unread", param=param)
    raise InvalidRequest("unsupported content part", param=param)


def _output(value: str | list[wire.ContentPart], param: str) -> str | list[ContentPart]:
    if isinstance(value, str):
        return value
    return [_part(p, f"{param}[{j}]") for j, p in enumerate(value)]


def _message(item: wire.Message, param: str) -> MessageItem:
    content: list[ContentPart]
    if isinstance(item.content, str):
        content = [OutputTextPart(text=item.content) if item.role == "assistant"
                   else InputTextPart(text=item.content)]
    else:
        content = [_part(p, f"{param}.content[{j}]") for j, p in enumerate(item.content)]
    return MessageItem(role=item.role, content=content, id=item.id or new_id("msg"),
                       status=item.status or "completed",
                       phase=item.phase)


def canonical(item: wire.InputItem, param: str) -> Item:
    """One wire input item as the item triode stores and replays."""
    match item:
        case wire.Message():
            return _message(item, param)
        case wire.FunctionCall():
            return FunctionCallItem(id=item.id or new_id("fc"), call_id=item.call_id,
                                    name=item.name, arguments=item.arguments,
                                    status=item.status or "completed",
                                    namespace=item.namespace or None)
        case wire.CustomToolCall():
            return CustomToolCallItem(id=item.id or new_id("ctc"), call_id=item.call_id,
                                      name=item.name, input=item.input,
                                      status=item.status or "completed",
                                      namespace=item.namespace or None)
        case wire.FunctionCallOutput():
            return FunctionCallOutputItem(id=item.id or new_id("fco"), call_id=item.call_id,
                                          output=_output(item.output, f"{param}.output"),
                                          status=item.status or "completed")
        case wire.CustomToolCallOutput():
            return CustomToolCallOutputItem(id=item.id or new_id("ctco"),
                                            call_id=item.call_id,
                                            output=_output(item.output, f"{param}.output"),
                                            status=item.status or "completed")
        case wire.ReasoningItem():
            return ReasoningItem(
                id=item.id or new_id("rs"),
                summary=[SummaryTextPart(text=p.text) for p in item.summary],
                content=None if item.content is None
                else [ReasoningTextPart(text=p.text) for p in item.content],
                encrypted_content=item.encrypted_content)
        case wire.CompactionItem():
            return _compaction(item, param)
        case wire.AdditionalTools():
            return AdditionalToolsItem(id=item.id or new_id("at"), role=item.role or "developer",
                                       tools=item.tools)
        case wire.McpListTools():
            return McpListToolsItem(id=item.id or new_id("mcpl"), server_label=item.server_label,
                                    tools=[_listed_tool(t, f"{param}.tools[{j}]")
                                           for j, t in enumerate(item.tools)],
                                    error=item.error)
        case wire.McpCall():
            error = item.error
            return McpCallItem(id=item.id or new_id("mcp"), server_label=item.server_label,
                               name=item.name, arguments=item.arguments, output=item.output,
                               error={"type": "mcp_protocol_error", "code": 0, "message": error}
                               if isinstance(error, str) else error,
                               approval_request_id=item.approval_request_id,
                               status=item.status or "completed")
        case wire.McpApprovalRequest():
            return McpApprovalRequestItem(id=item.id or new_id("mcpr"),
                                          server_label=item.server_label, name=item.name,
                                          arguments=item.arguments)
        case wire.McpApprovalResponse():
            return McpApprovalResponseItem(id=item.id or new_id("mcpa"),
                                           approval_request_id=item.approval_request_id,
                                           approve=item.approve, reason=item.reason)
        case wire.ItemReference():
            # The turn service replaces every reference with the item it names.
            raise InvalidRequest(f"item_reference '{item.id}' was not resolved", param=param)
        case wire.CompactionTrigger():
            raise InvalidRequest("a compaction_trigger is accepted only as the last input "
                                 "item of POST /v1/responses", param=param)
    raise InvalidRequest("unsupported input item", param=param)


def _listed_tool(tool: dict[str, Any], param: str) -> dict[str, Any]:
    """One tool of a replayed `mcp_list_tools`: a name and an object input schema."""
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise InvalidRequest("a listed MCP tool needs a name", param=f"{param}.name")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise InvalidRequest("a listed MCP tool needs an input_schema object",
                             param=f"{param}.input_schema")
    description = tool.get("description")
    return {"name": tool["name"], "input_schema": schema,
            "description": description if isinstance(description, str) else None,
            "annotations": tool.get("annotations")}


def mcp_result_text(item: McpCallItem) -> str:
    """What the model is shown of an MCP call's result: its output, or its error."""
    if item.error is None:
        return item.output or ""
    return "error: " + json.dumps(item.error, ensure_ascii=False)


def mcp_denial_text(reason: str | None) -> str:
    return "error: the user denied this tool call" + (f" ({reason})" if reason else "")


def _compaction(item: wire.CompactionItem, param: str) -> CompactionItem:
    """A compaction item with its kept items checked and made canonical like any input (a
    client may write the blob itself: it is documented as plain base64url JSON)."""
    from .convert import structure

    where = f"{param}.encrypted_content"
    summary, raw = compaction.decode(item.encrypted_content, where)
    kept = []
    for j, value in enumerate(raw):
        try:
            parsed = structure({"input": [value]}, wire.ItemList).input[0]
        except InvalidRequest as exc:
            raise InvalidRequest(f"compaction item {j} is invalid: {exc.message}",
                                 param=where) from None
        if isinstance(parsed, (wire.CompactionItem, wire.ItemReference, wire.CompactionTrigger)):
            raise InvalidRequest(f"compaction item {j}: a compaction cannot keep a "
                                 f"'{parsed.type}' item", param=where)
        kept.append(canonical(parsed, where))
    return CompactionItem(id=item.id or new_id("cmp"),
                          encrypted_content=compaction.encode(summary, kept))


def input_items(req: wire.CreateResponse) -> list[Item]:
    """The request's input as canonical items (what input_items lists and history keeps)."""
    raw = [wire.Message(role="user", content=req.input)] if isinstance(req.input, str) \
        else req.input
    return [canonical(item, f"input[{i}]") for i, item in enumerate(raw)]


def text_of(content: str | list[ContentPart]) -> str:
    """The text of a content (its images left out)."""
    if isinstance(content, str):
        return content
    return "".join(p.refusal if isinstance(p, RefusalPart) else p.text for p in content
                   if not isinstance(p, InputImagePart))


def _content(content: str | list[ContentPart]) -> str | list[dict[str, Any]]:
    """A message's content for the chat template: its text, or, when it holds images, the
    multimodal list vision templates take (`{"type": "image"}` where each image goes; the
    image's URL rides along under `image_url` for the model's image inputs, in order)."""
    if isinstance(content, str) or not any(isinstance(p, InputImagePart) for p in content):
        return text_of(content)
    parts: list[dict[str, Any]] = []
    for p in content:
        if isinstance(p, InputImagePart):
            parts.append({"type": "image", "image_url": p.image_url, "detail": p.detail})
        else:
            text = p.refusal if isinstance(p, RefusalPart) else p.text
            if parts and parts[-1]["type"] == "text":
                parts[-1]["text"] += text
            else:
                parts.append({"type": "text", "text": text})
    return parts


def message_images(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The image parts of chat-template messages, in the order the template shows them."""
    return [part for m in messages if isinstance(m.get("content"), list)
            for part in m["content"] if part.get("type") == "image"]


def reasoning_text(item: ReasoningItem) -> str:
    """A reasoning item's text: its content, else triode's encrypted_content, else summary."""
    if item.content:
        return "\n".join(p.text for p in item.content)
    if item.encrypted_content:
        text = decrypt_reasoning(item.encrypted_content)
        if text is not None:
            return text
    return "\n".join(p.text for p in item.summary)


def _arguments(raw: str) -> Any:
    """Templates expect an arguments mapping; text that is not a JSON object stays text."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, dict) else raw


def chat_messages(instructions: str | None, items: Sequence[Item],
                  rendered_calls: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Canonical items (history first, then this turn's input) → chat-template messages.
    `additional_tools` and `mcp_list_tools` items render nothing here: their tools go to the
    template's tools. An MCP approval request renders as the model's call; the call that ran
    once it was approved, as that call's result. `rendered_calls`: approval requests the
    messages these follow already show, by id with their tool's name (a response's output
    rendered after its prompt)."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    reasoning: str | None = None      # a reasoning item waits for the assistant turn it precedes
    names = dict(rendered_calls or {})   # call_id → the name its output answers
    approvals = set(names)            # MCP approval requests rendered as calls

    def assistant_turn(*, merge: bool) -> dict[str, Any]:
        """Tool calls join the assistant turn just before them; text starts a new one."""
        nonlocal reasoning
        if merge and messages and messages[-1]["role"] == "assistant" and reasoning is None:
            return messages[-1]
        msg: dict[str, Any] = {"role": "assistant", "content": ""}
        if reasoning is not None:
            msg["reasoning_content"] = reasoning
            reasoning = None
        messages.append(msg)
        return msg

    def call(call_id: str, label: str, name: str, arguments: str) -> None:
        """An MCP call, as the model wrote it: a call of the namespaced tool."""
        chat_name = names[call_id] = chat_tool_name(name, label)
        assistant_turn(merge=True).setdefault("tool_calls", []).append(
            {"type": "function", "id": call_id,
             "function": {"name": chat_name, "arguments": _arguments(arguments)}})

    def result(call_id: str, text: str) -> None:
        msg = {"role": "tool", "tool_call_id": call_id, "content": text}
        if call_id in names:
            msg["name"] = names[call_id]
        messages.append(msg)

    for item in items:
        match item:
            case ReasoningItem():
                reasoning = reasoning_text(item)
            case MessageItem(role="assistant"):
                turn = assistant_turn(merge=False)
                turn["content"] = text_of(item.content)
                if item.phase:   # for templates that know it (commentary / final_answer)
                    turn["phase"] = item.phase
            case MessageItem():
                messages.append({"role": item.role, "content": _content(item.content)})
            case FunctionCallItem() | CustomToolCallItem():
                name = chat_tool_name(item.name, item.namespace)
                names[item.call_id] = name
                arguments = _arguments(item.arguments) if isinstance(item, FunctionCallItem) \
                    else {CUSTOM_INPUT: item.input}
                assistant_turn(merge=True).setdefault("tool_calls", []).append(
                    {"type": "function", "id": item.call_id,
                     "function": {"name": name, "arguments": arguments}})
            case FunctionCallOutputItem() | CustomToolCallOutputItem():
                msg = {"role": "tool", "tool_call_id": item.call_id,
                       "content": _content(item.output)}
                if item.call_id in names:
                    msg["name"] = names[item.call_id]
                messages.append(msg)
            case McpApprovalRequestItem():
                # The model's call, waiting: a call (its result follows, or its denial).
                call(item.id, item.server_label, item.name, item.arguments)
                approvals.add(item.id)
            case McpApprovalResponseItem(approve=False):
                result(item.approval_request_id, mcp_denial_text(item.reason))
            case McpCallItem():
                call_id = item.approval_request_id or item.id
                if call_id not in approvals:
                    call(call_id, item.server_label, item.name, item.arguments)
                result(call_id, mcp_result_text(item))
    return messages


def _visible(message: dict[str, Any]) -> dict[str, Any]:
    return {k: message[k] for k in ("role", "content", "tool_calls", "tool_call_id")
            if message.get(k)}


def turn_keys(messages: list[dict[str, Any]]) -> list[str | None]:
    """For each assistant turn, a key of the turn *and the conversation before it* (what the
    client sees of them: no reasoning, no system or developer messages, which a chain does
    not inherit); None for other messages. The reasoning echo remembers and finds turns by
    it, so equal text in another conversation is never mistaken for the same turn."""
    keys: list[str | None] = []
    digest = hashlib.sha256()
    for message in messages:
        if message["role"] in ("system", "developer"):
            keys.append(None)
            continue
        blob = json.dumps(_visible(message), sort_keys=True, ensure_ascii=False,
                          separators=(",", ":"))
        digest.update(blob.encode() + b"\n")
        keys.append(digest.copy().hexdigest() if message["role"] == "assistant" else None)
    return keys
