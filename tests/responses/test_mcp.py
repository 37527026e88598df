"""MCP declarations as pure code: validation (a 400 names the field), the echo without
credentials, allowed_tools and require_approval filters, the listings a history holds."""

from __future__ import annotations

import pytest

from triode.errors import InvalidRequest
from triode.responses.mcp import (listings, parse_server, parse_servers, tools_of,
                                  without_credentials)
from triode.responses.objects import McpListToolsItem

LISTING = McpListToolsItem(id="l", server_label="s", tools=[
    {"name": "read", "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "write", "input_schema": {"type": "object", "properties": {"x": {}}},
     "description": "Writes"},
    {"name": "odd", "input_schema": {"type": "string"}}])


def server(**fields):
    return parse_server({"type": "mcp", "server_label": "s", "server_url": "http://h/mcp",
                         **fields}, "tools[2]")


@pytest.mark.parametrize("fields,param", [
    ({"server_label": ""}, "tools[2].server_label"),
    ({"server_label": "a.b"}, "tools[2].server_label"),
    ({"server_label": "x" * 65}, "tools[2].server_label"),
    ({"connector_id": "connector_gmail"}, "tools[2].connector_id"),
    ({"tunnel_id": "t"}, "tools[2].tunnel_id"),
    ({"server_url": 3}, "tools[2].server_url"),
    ({"headers": {"a": 1}}, "tools[2].headers"),
    ({"headers": ["a"]}, "tools[2].headers"),
    ({"authorization": 5}, "tools[2].authorization"),
    ({"allowed_tools": "read"}, "tools[2].allowed_tools"),
    ({"allowed_tools": {"tool_names": "read"}}, "tools[2].allowed_tools.tool_names"),
    ({"allowed_tools": {"read_only": "yes"}}, "tools[2].allowed_tools.read_only"),
    ({"allowed_tools": {"names": []}}, "tools[2].allowed_tools"),
    ({"require_approval": "sometimes"}, "tools[2].require_approval"),
    ({"require_approval": {"maybe": {}}}, "tools[2].require_approval"),
    ({"require_approval": {"never": "a"}}, "tools[2].require_approval.never"),
    ({"require_approval": 1}, "tools[2].require_approval"),
    ({"server_description": 1}, "tools[2].server_description"),
])
def test_a_bad_declaration_is_a_400_naming_the_field(fields, param):
    with pytest.raises(InvalidRequest) as exc:
        server(**fields)
    assert exc.value.param == param


def test_a_label_of_64_characters_is_taken():
    assert server(server_label="x" * 64).label == "x" * 64


def test_two_servers_may_not_share_a_label():
    with pytest.raises(InvalidRequest) as exc:
        parse_servers([{"type": "function", "name": "f"},
                       {"type": "mcp", "server_label": "a", "server_url": "http://h"},
                       {"type": "mcp", "server_label": "a", "server_url": "http://i"}])
    assert exc.value.param == "tools[2].server_label"


def test_the_echo_carries_no_credentials():
    """headers and authorization are never echoed; a URL's user and password are cut."""
    s = parse_server({"type": "mcp", "server_label": "s", "headers": {"k": "v1"},
                      "authorization": "tok", "allowed_tools": ["read"],
                      "server_url": "https://me:pw@h.example:8443/mcp?q=1"}, "tools[0]")
    assert s.echoed == {"type": "mcp", "server_label": "s", "allowed_tools": ["read"],
                        "server_url": "https://h.example:8443/mcp?q=1", "headers": None}
    assert s.credentials() == {"k": "v1", "Authorization": "Bearer tok"}
    assert "v1" not in repr(s) and "tok" not in repr(s)
    assert without_credentials("http://[::1]:80/x") == "http://[::1]:80/x"
    assert without_credentials("http://u@[::1]/x") == "http://[::1]/x"


@pytest.mark.parametrize("approval,needs", [
    (None, {"read": True, "write": True}),      # OpenAI's default: every call
    ("always", {"read": True, "write": True}),
    ("never", {"read": False, "write": False}),
    ({"never": {"read_only": True}}, {"read": False, "write": True}),
    ({"never": {"tool_names": ["write"]}}, {"read": True, "write": False}),
    ({"always": {"tool_names": ["read"]}, "never": {"read_only": True}},
     {"read": True, "write": True}),          # always wins
    ({"always": {"tool_names": ["write"]}}, {"read": True, "write": True}),
    ({"never": {}}, {"read": False, "write": False}),   # an empty filter matches every tool
])
def test_require_approval(approval, needs):
    s = server(**({} if approval is None else {"require_approval": approval}))
    hints = {"read": {"readOnlyHint": True}, "write": None}
    assert {name: s.needs_approval(name, hints[name]) for name in needs} == needs


def test_allowed_tools_choose_what_the_model_sees():
    """By names, or by read_only; each tool is a function in the label's namespace, its
    description prefixed with the server's; a non-object schema becomes an empty object."""
    everything = tools_of(server(server_description="Files"), LISTING)
    assert [t.chat_name for t in everything] == ["s.read", "s.write", "s.odd"]
    assert everything[1].description == "Files: Writes"
    assert everything[2].parameters == {"type": "object", "properties": {}}
    assert all(t.server == "s" for t in everything)
    assert [t.name for t in tools_of(server(allowed_tools=["write", "gone"]), LISTING)] == \
        ["write"]
    assert [t.name for t in tools_of(server(allowed_tools={"read_only": True}), LISTING)] == \
        ["read"]
    assert tools_of(server(allowed_tools=[]), LISTING) == []


def test_the_last_successful_listing_of_each_label_is_reused():
    failed = McpListToolsItem(id="f", server_label="s", error="down")
    newer = McpListToolsItem(id="n", server_label="s", tools=[])
    other = McpListToolsItem(id="o", server_label="t", tools=[])
    assert listings([LISTING, other, newer, failed]) == {"s": newer, "t": other}
    assert listings([failed]) == {}
