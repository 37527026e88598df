"""MCP tools in a request, as pure code: the `mcp` tool declarations, which of a server's
tools the model sees (`allowed_tools`), which calls wait for the client's approval
(`require_approval`), and the listings a history already holds.

A server's tools are shown to the model as a namespace named by the server's label
(`label.tool`), through the same rendering and grammars as a `namespace` tool. The
connections themselves are the turn service's (service/mcp.py); nothing here does I/O.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, Sequence
from urllib.parse import urlsplit, urlunsplit

import attrs

from ..errors import InvalidRequest
from .objects import (Item, McpApprovalRequestItem, McpApprovalResponseItem,
                      McpListToolsItem)
from .tools import Tool

LABEL = re.compile(r"[A-Za-z0-9_-]{1,64}")
APPROVAL_MODES = ("always", "never")
# The declaration's fields this server reads, and those it accepts without effect.
FIELDS = ("type", "server_label", "server_url", "connector_id", "tunnel_id", "headers",
          "authorization", "allowed_tools", "require_approval", "server_description",
          "allowed_callers", "defer_loading")


@attrs.frozen
class ToolFilter:
    """`{tool_names, read_only}`: a tool matches when its name is listed (if names are
    given) and its `readOnlyHint` annotation equals `read_only` (if given)."""

    names: tuple[str, ...] | None = None
    read_only: bool | None = None

    def matches(self, name: str, annotations: Any) -> bool:
        if self.names is not None and name not in self.names:
            return False
        if self.read_only is not None:
            hint = annotations.get("readOnlyHint") if isinstance(annotations, dict) else None
            return bool(hint) == self.read_only
        return True


def _filter(value: Any, param: str) -> ToolFilter:
    if isinstance(value, list):
        if not all(isinstance(n, str) for n in value):
            raise InvalidRequest(f"'{param}' must be a list of tool names", param=param)
        return ToolFilter(tuple(value))
    if not isinstance(value, dict) or set(value) - {"tool_names", "read_only"}:
        raise InvalidRequest(f"'{param}' must be a list of tool names or an object with "
                             "tool_names and read_only", param=param)
    names = value.get("tool_names")
    if names is not None and (not isinstance(names, list)
                              or not all(isinstance(n, str) for n in names)):
        raise InvalidRequest(f"'{param}.tool_names' must be a list of strings",
                             param=f"{param}.tool_names")
    read_only = value.get("read_only")
    if read_only is not None and not isinstance(read_only, bool):
        raise InvalidRequest(f"'{param}.read_only' must be a boolean",
                             param=f"{param}.read_only")
    return ToolFilter(None if names is None else tuple(names), read_only)


def without_credentials(url: str) -> str:
    """A URL as it may be shown: no user name or password."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@attrs.frozen
class McpServer:
    """One `mcp` tool of a request: a server it names by label (the operator's, from
    --mcp-config) or by URL. `headers` and `authorization` are the request's credentials:
    they live as long as the request, and nothing here shows them (`echo`, `repr`)."""

    label: str
    url: str | None
    param: str                                   # where it stands: tools[i]
    headers: dict[str, str] = attrs.field(factory=dict, repr=False)
    authorization: str | None = attrs.field(default=None, repr=False)
    allowed: ToolFilter | None = None
    approval: str | tuple[ToolFilter | None, ToolFilter | None] = "always"
    description: str | None = None
    echoed: dict[str, Any] = attrs.Factory(dict)

    def allows(self, name: str, annotations: Any) -> bool:
        return self.allowed is None or self.allowed.matches(name, annotations)

    def needs_approval(self, name: str, annotations: Any) -> bool:
        """OpenAI's rule: every call needs approval unless `require_approval` says `never`,
        or its `never` filter matches the tool (and its `always` filter does not)."""
        if isinstance(self.approval, str):
            return self.approval != "never"
        always, never = self.approval
        if always is not None and always.matches(name, annotations):
            return True
        return not (never is not None and never.matches(name, annotations))

    def credentials(self) -> dict[str, str]:
        """The HTTP headers the request gives this server (`authorization` as a bearer)."""
        headers = dict(self.headers)
        if self.authorization:
            headers["Authorization"] = f"Bearer {self.authorization}"
        return headers


def _string(obj: dict[str, Any], key: str, param: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"Invalid value for '{param}.{key}': expected a string",
                             param=f"{param}.{key}")
    return value


def parse_server(obj: dict[str, Any], param: str) -> McpServer:
    """One `{"type": "mcp", ...}` declaration, validated; a 400 names the field."""
    label = obj.get("server_label")
    if not isinstance(label, str) or not LABEL.fullmatch(label):
        raise InvalidRequest(f"'{param}.server_label' is required: 1-64 letters, digits, '_' "
                             "or '-'", param=f"{param}.server_label")
    for other in ("connector_id", "tunnel_id"):
        if obj.get(other) is not None:
            raise InvalidRequest(f"'{param}.{other}' is not supported: this server has no "
                                 "connectors or tunnels; give server_url (or a server_label "
                                 "of the operator's --mcp-config)", param=f"{param}.{other}")
    url = _string(obj, "server_url", param)
    headers = obj.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in headers.items()):
        raise InvalidRequest(f"'{param}.headers' must be an object of strings",
                             param=f"{param}.headers")
    authorization = _string(obj, "authorization", param)
    allowed = obj.get("allowed_tools")
    approval_raw = obj.get("require_approval")
    approval: str | tuple[ToolFilter | None, ToolFilter | None] = "always"
    if isinstance(approval_raw, str):
        if approval_raw not in APPROVAL_MODES:
            raise InvalidRequest(f"'{param}.require_approval' must be 'always', 'never' or "
                                 "an object with always and never filters",
                                 param=f"{param}.require_approval")
        approval = approval_raw
    elif isinstance(approval_raw, dict):
        if set(approval_raw) - set(APPROVAL_MODES):
            raise InvalidRequest(f"'{param}.require_approval' takes only 'always' and 'never'",
                                 param=f"{param}.require_approval")
        approval = tuple(  # type: ignore[assignment]
            None if approval_raw.get(k) is None
            else _filter(approval_raw[k], f"{param}.require_approval.{k}")
            for k in APPROVAL_MODES)
    elif approval_raw is not None:
        raise InvalidRequest(f"'{param}.require_approval' must be 'always', 'never' or an "
                             "object", param=f"{param}.require_approval")
    description = _string(obj, "server_description", param)
    echoed = {k: v for k, v in obj.items()
              if k in FIELDS and k not in ("headers", "authorization")}
    if url is not None:
        echoed["server_url"] = without_credentials(url)
    echoed["headers"] = None   # never echoed (docs/mcp.md)
    return McpServer(label, url, param, dict(headers), authorization,
                     None if allowed is None else _filter(allowed, f"{param}.allowed_tools"),
                     approval, description, echoed)


def parse_servers(raw: list[dict[str, Any]] | None) -> list[McpServer]:
    """The request's `mcp` tools (each label once)."""
    servers: list[McpServer] = []
    for i, obj in enumerate(raw or []):
        if isinstance(obj, dict) and obj.get("type") == "mcp":
            server = parse_server(obj, f"tools[{i}]")
            if any(s.label == server.label for s in servers):
                raise InvalidRequest(f"two mcp tools have the server_label '{server.label}'",
                                     param=f"tools[{i}].server_label")
            servers.append(server)
    return servers


def refuse_approvals(given: Sequence[Item]) -> None:
    """On a server that runs no MCP tools, an approval cannot be acted on: a 400 naming
    the first `mcp_approval_response` of the input."""
    for i, item in enumerate(given):
        if isinstance(item, McpApprovalResponseItem):
            raise InvalidRequest("this server runs no MCP tools (--mcp-config, --mcp-urls): "
                                 "an mcp_approval_response cannot be acted on",
                                 param=f"input[{i}]")


def listings(history: Sequence[Item]) -> dict[str, McpListToolsItem]:
    """The last successful listing of each server label in a history (input and chain):
    reused instead of listing the server again."""
    found: dict[str, McpListToolsItem] = {}
    for item in history:
        if isinstance(item, McpListToolsItem) and item.error is None:
            found[item.server_label] = item
    return found


def tools_of(server: McpServer, listing: McpListToolsItem) -> list[Tool]:
    """The listed tools the model may call, in the server's namespace."""
    tools = []
    for t in listing.tools:
        if not server.allows(t["name"], t.get("annotations")):
            continue
        schema = t.get("input_schema") or {}
        if schema.get("type", "object") != "object":
            schema = {"type": "object", "properties": {}}
        description = t.get("description") or ""
        if server.description:
            description = f"{server.description}: {description}" if description \
                else server.description
        tools.append(Tool("function", t["name"], server.label, description or None,
                          {"type": "object", **schema}, server=server.label))
    return tools


class McpRunner(Protocol):
    """Runs a response's MCP calls on its servers, with the request's credentials (the turn
    service's, service/mcp.py): the supervisor asks, it answers (output, error)."""

    @property
    def max_calls(self) -> int:
        """The calls one response may make (--mcp-max-calls)."""

    async def call(self, label: str, name: str, arguments: str
                   ) -> tuple[str | None, dict[str, Any] | None]: ...


@attrs.frozen
class McpTurn:
    """A response's MCP servers: who runs their calls, the listings this response made
    (its first output items), a listing's failure (the response fails with it), and the
    approved calls of its input that have not run yet (they run first, once)."""

    runner: McpRunner
    listings: list[McpListToolsItem] = attrs.Factory(list)
    failure: str | None = None
    approved: list[McpApprovalRequestItem] = attrs.Factory(list)
    # The approval requests the prompt shows as calls: id → the tool's chat name.
    rendered_calls: dict[str, str] = attrs.Factory(dict)


@attrs.frozen
class McpTools:
    """What a request's MCP servers add to its plan: their tools (namespaced by label), their
    declarations as the response echoes them (without credentials), and which tools' calls
    wait for the client's approval (by chat name)."""

    tools: list[Tool]
    echoes: list[dict[str, Any]]
    approvals: dict[str, bool]
    turn: McpTurn
