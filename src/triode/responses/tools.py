"""Tool declarations and tool_choice: validated, echoed, and presented to the chat template.

Accepted: `function` tools (the Responses flat shape, or the chat shape nested under
`function`), `custom` tools (free-form text input, optional `format` grammar of syntax `lark`
or `regex`) and `namespace` tools (a named group of function tools). Hosted tool types are a
dropped by default (`--hosted-tools ignore`: the local model cannot run them, and clients
such as Codex always send them; `hosted_types` names what was dropped), or a 400 naming the
tool with `--hosted-tools error`.
"""

from __future__ import annotations

from typing import Any, Sequence

import attrs

from ..errors import InvalidRequest
from .items import CUSTOM_INPUT, chat_tool_name
from .objects import AdditionalToolsItem, Item

HOSTED_TYPES = frozenset({
    "web_search", "web_search_2025_08_26", "web_search_preview",
    "web_search_preview_2025_03_11", "file_search", "computer", "computer_use_preview",
    "computer_use", "code_interpreter", "image_generation", "mcp", "apply_patch",
    "function_shell", "shell", "local_shell", "tool_search", "programmatic_tool_calling",
})
GRAMMAR_SYNTAXES = ("lark", "regex")


@attrs.frozen
class Tool:
    kind: str                      # "function" | "custom"
    name: str
    namespace: str | None
    description: str | None
    parameters: dict[str, Any] | None = None   # function tools
    strict: bool | None = None
    format: dict[str, Any] | None = None       # custom tools
    server: str | None = None                  # an MCP server's tool: the server's label

    @property
    def chat_name(self) -> str:
        return chat_tool_name(self.name, self.namespace)

    def for_template(self) -> dict[str, Any]:
        params = self.parameters if self.kind == "function" else {
            "type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}},
            "required": [CUSTOM_INPUT]}
        fn = {"name": self.chat_name, "description": self.description or "",
              "parameters": params or {"type": "object", "properties": {}}}
        return {"type": "function", "function": fn}

    def for_grammar(self) -> dict[str, Any]:
        """The shape constraints.tool_call_grammar takes, under the name the model writes."""
        if self.kind == "custom":
            return {"type": "custom", "name": self.chat_name, "format": self.format}
        return {"type": "function", "name": self.chat_name, "parameters": self.parameters}

    def echo(self) -> dict[str, Any]:
        if self.kind == "custom":
            out = {"type": "custom", "name": self.name, "description": self.description}
            return {**out, "format": self.format} if self.format else out
        return {"type": "function", "name": self.name, "description": self.description,
                "parameters": self.parameters, "strict": self.strict}


def _field(obj: dict[str, Any], key: str, kind: type, param: str, *, required: bool = False
           ) -> Any:
    value = obj.get(key)
    if value is None:
        if required:
            raise InvalidRequest(f"Missing required parameter: '{param}.{key}'.",
                                 param=f"{param}.{key}")
        return None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InvalidRequest(f"Invalid value for '{param}.{key}': expected {kind.__name__}",
                             param=f"{param}.{key}")
    return value


def _function(obj: dict[str, Any], param: str, namespace: str | None) -> Tool:
    if isinstance(obj.get("function"), dict):   # the chat shape
        obj, param = obj["function"], f"{param}.function"
    name = _field(obj, "name", str, param, required=True)
    if not name:
        raise InvalidRequest(f"'{param}.name' must not be empty", param=f"{param}.name")
    params = _field(obj, "parameters", dict, param)
    if params is not None and params.get("type", "object") != "object":
        raise InvalidRequest(f"'{param}.parameters' must be a JSON schema of type object",
                             param=f"{param}.parameters")
    return Tool("function", name, namespace, _field(obj, "description", str, param), params,
                _field(obj, "strict", bool, param))


def _custom(obj: dict[str, Any], param: str, namespace: str | None) -> Tool:
    name = _field(obj, "name", str, param, required=True)
    fmt = _field(obj, "format", dict, param)
    if fmt is not None and fmt.get("type") not in (None, "text"):
        if fmt.get("type") != "grammar" or fmt.get("syntax") not in GRAMMAR_SYNTAXES \
                or not isinstance(fmt.get("definition"), str):
            raise InvalidRequest(
                f"'{param}.format' must be {{\"type\": \"text\"}} or {{\"type\": \"grammar\", "
                f"\"syntax\": \"lark\" | \"regex\", \"definition\": str}}", param=f"{param}.format")
    return Tool("custom", name, namespace, _field(obj, "description", str, param), format=fmt)


def declared_tools(items: Sequence[Item], tools: list[dict[str, Any]] | None
                   ) -> tuple[list[dict[str, Any]], list[str]]:
    """Every tool declaration a turn sees, with where each came from: the `additional_tools`
    items of its (replayed) history and input, then its `tools`. A tool declared again
    (the same type and name: a client resending its tool list every turn) replaces the
    earlier declaration in place."""
    found: dict[tuple[Any, Any], tuple[dict[str, Any], str]] = {}
    for item in items:
        if isinstance(item, AdditionalToolsItem):
            for j, tool in enumerate(item.tools):
                param = f"additional_tools[{item.id}].tools[{j}]"
                found[_identity(tool, param)] = (tool, param)
    for i, tool in enumerate(tools or []):
        found[_identity(tool, f"tools[{i}]")] = (tool, f"tools[{i}]")
    return [tool for tool, _ in found.values()], [param for _, param in found.values()]


def _identity(tool: Any, where: str) -> tuple[Any, Any]:
    """What makes two declarations the same tool; anything malformed is kept apart (its
    own identity) so that parse_tools reports it where it stands."""
    if isinstance(tool, dict) and isinstance(tool.get("type"), str):
        name = tool.get("name")
        if isinstance(tool.get("function"), dict):
            name = tool["function"].get("name")
        if isinstance(name, str) or name is None:
            return tool["type"], name
    return "malformed", where


def hosted_types(raw: list[dict[str, Any]] | None, *, mcp: bool = False) -> tuple[str, ...]:
    """The hosted tool types a request lists (what `--hosted-tools ignore` drops), each once;
    `mcp`: MCP tools run here (not dropped)."""
    kinds = (obj.get("type") for obj in raw or () if isinstance(obj, dict))
    return tuple(dict.fromkeys(k for k in kinds if isinstance(k, str) and k in HOSTED_TYPES
                               and not (mcp and k == "mcp")))


def parse_tools(raw: list[dict[str, Any]] | None, *, hosted: str,
                params: list[str] | None = None, mcp: bool = False) -> list[Tool]:
    """Validates the request's tools; hosted types are refused, or dropped when `hosted` is
    `ignore`. Tool names (namespace-qualified) must be unique. `params[i]` names where
    `raw[i]` came from (default `tools[i]`). `mcp`: this server runs MCP tools, whose
    declarations responses/mcp.py reads (skipped here)."""
    tools: list[Tool] = []
    for i, obj in enumerate(raw or []):
        param = params[i] if params is not None else f"tools[{i}]"
        if not isinstance(obj, dict):
            raise InvalidRequest(f"'{param}' must be an object", param=param)
        kind = obj.get("type")
        if not isinstance(kind, str):
            raise InvalidRequest(f"Invalid value for '{param}.type': expected a string",
                                 param=f"{param}.type")
        if kind == "function":
            tools.append(_function(obj, param, None))
        elif kind == "custom":
            tools.append(_custom(obj, param, None))
        elif kind == "namespace":
            ns = _field(obj, "name", str, param, required=True)
            inner = _field(obj, "tools", list, param, required=True)
            for j, sub in enumerate(inner):
                sub_param = f"{param}.tools[{j}]"
                if not isinstance(sub, dict) or sub.get("type") not in ("function", "custom"):
                    raise InvalidRequest(f"'{sub_param}' must be a function or custom tool",
                                         param=sub_param)
                make = _function if sub["type"] == "function" else _custom
                tools.append(make(sub, sub_param, ns))
        elif kind == "mcp" and mcp:
            continue
        elif kind in HOSTED_TYPES:
            if hosted == "ignore":
                continue
            raise InvalidRequest(
                f"The hosted tool type '{kind}' is not supported: this server runs no hosted "
                "tools (start it with --hosted-tools ignore to drop them)", param=f"{param}.type")
        else:
            raise InvalidRequest(f"Invalid value for '{param}.type': unknown tool type {kind!r}",
                                 param=f"{param}.type")
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if tool.chat_name in seen:
            raise InvalidRequest(f"duplicate tool name '{tool.chat_name}'", param="tools")
        seen.add(tool.chat_name)
    return tools


@attrs.frozen
class ToolChoice:
    mode: str                       # "none" | "auto" | "required"
    allowed: tuple[str, ...]        # chat names the model may call (all tools for auto)
    echo: Any


def _named(choice: dict[str, Any], tools: list[Tool], param: str) -> Tool:
    name = choice.get("name")
    if name is None and isinstance(choice.get("function"), dict):   # chat shape
        name = choice["function"].get("name")
    if not isinstance(name, str):
        raise InvalidRequest(f"Missing required parameter: '{param}.name'.", param=f"{param}.name")
    kind = "custom" if choice.get("type") == "custom" else "function"
    wanted = chat_tool_name(name, choice.get("namespace"))
    for tool in tools:
        if tool.chat_name == wanted and tool.kind == kind:
            return tool
    raise InvalidRequest(f"tool_choice names the {kind} tool '{wanted}', which is not in tools",
                         param=f"{param}.name")


def parse_tool_choice(value: str | dict[str, Any] | None, tools: list[Tool]) -> ToolChoice:
    everything = tuple(t.chat_name for t in tools)
    if value is None or value == "auto":
        return ToolChoice("auto" if tools else "none", everything, "auto")
    if value == "none":
        return ToolChoice("none", (), "none")
    if value == "required":
        if not tools:
            raise InvalidRequest("tool_choice 'required' needs at least one tool",
                                 param="tool_choice")
        return ToolChoice("required", everything, "required")
    if isinstance(value, str):
        raise InvalidRequest(f"Invalid value for 'tool_choice': {value!r}", param="tool_choice")
    kind = value.get("type")
    if kind in ("function", "custom"):
        tool = _named(value, tools, "tool_choice")
        return ToolChoice("required", (tool.chat_name,), value)
    if kind == "mcp":
        label = value.get("server_label")
        name = value.get("name")
        wanted = tuple(t.chat_name for t in tools if t.server is not None
                       and t.server == label and (name is None or t.name == name))
        if not wanted:
            what = f"the tool '{name}' of " if name is not None else ""
            raise InvalidRequest(f"tool_choice names {what}the MCP server '{label}', which is "
                                 "not among the request's mcp tools (or lists no such tool)",
                                 param="tool_choice.name" if name is not None
                                 else "tool_choice.server_label")
        return ToolChoice("required", wanted, value)
    if kind == "allowed_tools":
        mode = value.get("mode", "auto")
        listed = value.get("tools")
        if mode not in ("auto", "required") or not isinstance(listed, list) or not listed:
            raise InvalidRequest("allowed_tools needs mode 'auto' or 'required' and a non-empty "
                                 "tools list", param="tool_choice")
        allowed = tuple(_named(t if isinstance(t, dict) else {}, tools,
                               f"tool_choice.tools[{i}]").chat_name
                        for i, t in enumerate(listed))
        return ToolChoice(mode, allowed, value)
    raise InvalidRequest(f"Invalid value for 'tool_choice.type': {kind!r}",
                         param="tool_choice.type")
