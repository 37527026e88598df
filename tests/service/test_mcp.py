"""The turn service's MCP side without a model: the --mcp-config file, where a request may
reach (--mcp-urls, a tenant's narrowing, resolved addresses), and approvals resolved."""

from __future__ import annotations

import json

import pytest

from triode.errors import InvalidRequest, SettingsError
from triode.responses.mcp import parse_server
from triode.responses.objects import (McpApprovalRequestItem, McpApprovalResponseItem,
                                      McpCallItem)
from triode.service.mcp import McpLimits, McpService, _approved, parse_config
from triode.service.media import FetchRule
from triode.tenants import Caller, Tenant


def config(servers) -> str:
    return json.dumps({"mcpServers": servers})


def test_the_config_file_takes_stdio_and_http_servers():
    servers = parse_config(config({
        "fs": {"command": "npx", "args": ["-y", "srv"], "env": {"K": "v"}},
        "web": {"url": "https://h.example/mcp", "headers": {"Authorization": "Bearer t"}},
        "old": {"url": "https://h.example/sse"},
        "typed": {"url": "https://h.example/events", "type": "sse"}}), "f.json")
    assert servers["fs"].transport == "stdio" and servers["fs"].args == ("-y", "srv")
    assert (servers["web"].transport, servers["old"].transport, servers["typed"].transport) \
        == ("http", "sse", "sse")
    assert "Bearer t" not in repr(servers["web"]) and "'K'" not in repr(servers["fs"])


@pytest.mark.parametrize("text,names", [
    ("{", "not JSON"),
    (json.dumps({"servers": {}}), "expected"),
    (config({"a b": {"command": "x"}}), "mcpServers.a b"),
    (config({"a": {"command": "x", "url": "http://h"}}), "either command"),
    (config({"a": {}}), "either command"),
    (config({"a": {"command": "x", "args": "y"}}), "args a list"),
    (config({"a": {"url": "ftp://h"}}), "mcpServers.a.url"),
    (config({"a": {"url": "http://h", "type": "ws"}}), "mcpServers.a.type"),
    (config({"a": {"command": "x", "type": "sse"}}), "mcpServers.a.type"),
    (config({"a": {"command": "x", "bogus": 1}}), "unknown field 'bogus'"),
    (config({"a": {"url": "http://h", "headers": {"k": 1}}}), "mcpServers.a.headers"),
])
def test_a_bad_config_is_one_line_naming_the_key(text, names):
    with pytest.raises(SettingsError) as exc:
        parse_config(text, "f.json")
    assert names in str(exc.value) and "--mcp-config f.json" in str(exc.value)


def service(urls: str | None = "127.0.0.1,*.example.com", **servers) -> McpService:
    configured = parse_config(config(servers), "f.json") if servers else {}
    return McpService(McpLimits(configured, FetchRule.parse(urls)), pool=None)


def mcp(**fields):
    return parse_server({"type": "mcp", "server_label": "s", **fields}, "tools[1]")


def test_a_configured_label_or_an_allowed_url():
    svc = service(local={"command": "x"})
    assert svc.target(Caller(), mcp(server_label="local")).configured is not None
    target = svc.target(Caller(), mcp(server_url="http://u:p@127.0.0.1:9/mcp",
                                      authorization="tok"))
    assert target.identity == "http://127.0.0.1:9/mcp"
    assert target.headers["Authorization"] == "Bearer tok"
    for declared in (mcp(), mcp(server_url="http://localhost/mcp"),
                     mcp(server_url="file:///etc/passwd")):
        with pytest.raises(InvalidRequest) as exc:
            svc.target(Caller(), declared)
        assert exc.value.param == "tools[1].server_url"
    with pytest.raises(InvalidRequest) as off:
        service(urls=None).target(Caller(), mcp(server_url="http://127.0.0.1/mcp"))
    assert "--mcp-urls" in off.value.message


def test_a_tenant_narrows_labels_and_hosts():
    svc = service(local={"command": "x"})
    narrow = Caller(Tenant("n", mcp_servers=(), mcp_urls=("other.example.com",)))
    for declared in (mcp(server_label="local"), mcp(server_url="http://127.0.0.1/mcp")):
        with pytest.raises(InvalidRequest):
            svc.target(narrow, declared)
    wide = Caller(Tenant("w", mcp_servers=("local",), mcp_urls=("*",)))
    assert svc.target(wide, mcp(server_label="local")).configured is not None
    assert svc.target(wide, mcp(server_url="http://127.0.0.1/mcp")).url is not None


async def test_a_wildcard_never_reaches_a_private_address():
    """localhost matched only by `*`: it resolves to loopback, a 400 naming the URL; the
    same host named exactly is the operator's word."""
    wild = service(urls="*")
    target = wild.target(Caller(), mcp(server_url="http://localhost:9/mcp"))
    with pytest.raises(InvalidRequest) as exc:
        await wild.check_url(target, "tools[1]")
    assert exc.value.param == "tools[1].server_url" and "private" in exc.value.message
    exact = service(urls="localhost")
    await exact.check_url(exact.target(Caller(), mcp(server_url="http://localhost:9/mcp")),
                          "tools[1]")


def test_approvals_resolve_against_the_history():
    request = McpApprovalRequestItem(id="r1", server_label="s", name="t", arguments="{}")
    yes = McpApprovalResponseItem(id="a1", approval_request_id="r1", approve=True)
    no = McpApprovalResponseItem(id="a2", approval_request_id="r1", approve=False)
    offered = {("s", "t")}
    assert _approved([request, yes], [yes], offered) == [request]
    assert _approved([request, yes, yes], [yes, yes], offered) == [request]   # once
    assert _approved([request, no], [no], offered) == []
    ran = McpCallItem(id="c", server_label="s", name="t", approval_request_id="r1")
    assert _approved([request, ran, yes], [yes], offered) == []
    with pytest.raises(InvalidRequest) as unknown:
        _approved([yes], [yes], offered)
    assert unknown.value.param == "input[0].approval_request_id"
    for other in (set(), {("s", "u")}, {("x", "t")}):   # not sent again, or not allowed
        with pytest.raises(InvalidRequest) as untooled:
            _approved([request, yes], [yes], other)
        assert untooled.value.param == "input[0]"
