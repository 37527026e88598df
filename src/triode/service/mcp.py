"""MCP servers for the turn service: which servers a request may reach, their listings,
and the runner a response's supervisor calls them through (docs/mcp.md).

The operator decides what can be reached. `--mcp-config FILE` names trusted servers (the
`mcpServers` JSON of Claude Desktop, Cursor and llama.cpp: `command`/`args`/`env` for a
stdio server, `url`/`headers` for an HTTP one), which a request selects by `server_label`;
`--mcp-urls` allows a request's own `server_url` by host, under `--media-fetch`'s rules
(every connection's resolved addresses are checked, redirects included); a tenant's keys
file entry narrows both. Connections come from the `mcp` SDK (streamable HTTP, SSE, stdio)
and live in the pool actor (actors/mcp.py), one per tenant, server and credentials.

A request's credentials (`headers`, `authorization`, a URL's user and password) live in
its runner only: never stored, logged, echoed or shown.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import socket
import ssl
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Sequence
from urllib.parse import urlsplit

import attrs
import trio

from ..actors.mcp import ConnectionKey, McpPoolHandle, describe
from ..errors import ExternalConnectorError, InvalidRequest, SettingsError
from ..model.decoding import MediaError
from ..responses import mcp as rules
from ..responses.ids import new_id
from ..responses.mcp import McpServer, McpTools, McpTurn
from ..responses.objects import (Item, McpApprovalRequestItem, McpApprovalResponseItem,
                                 McpCallItem, McpListToolsItem)
from ..tenants import Caller
from .media import FetchRule, checked_addresses

log = logging.getLogger(__name__)

CONFIG_FLAG = "--mcp-config"
SERVER_FIELDS = ("command", "args", "env", "cwd", "url", "headers", "type", "transport")
LIST_PAGES = 20                 # tools/list pages followed, at most
TIMEOUT_CODE = -32001           # the MCP SDK's code for a request that timed out


def missing_sdk() -> str | None:
    """Why MCP cannot run here (the `mcp` package is not installed), or None."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        return ("--mcp-config and --mcp-urls need the mcp package: pip install "
                "'triode[mcp]'")
    return None


@attrs.frozen
class ConfiguredServer:
    """One server of --mcp-config: a stdio command, or an HTTP endpoint."""

    label: str
    transport: str                      # "stdio" | "http" | "sse"
    url: str | None = None
    headers: dict[str, str] = attrs.field(factory=dict, repr=False)
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = attrs.field(default=None, repr=False)
    cwd: str | None = None


def _strings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise SettingsError(f"{where} must be an object of strings")
    return dict(value)


def parse_config(text: str, source: str) -> dict[str, ConfiguredServer]:
    """The servers of an `mcpServers` file; a SettingsError naming the file and the key for
    anything wrong."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise SettingsError(f"{CONFIG_FLAG} {source}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("mcpServers"), dict):
        raise SettingsError(f"{CONFIG_FLAG} {source}: expected {{\"mcpServers\": "
                            "{\"<label>\": {\"command\": ...} | {\"url\": ...}}}")
    servers = {}
    for label, spec in doc["mcpServers"].items():
        where = f"{CONFIG_FLAG} {source}: mcpServers.{label}"
        if not rules.LABEL.fullmatch(label):
            raise SettingsError(f"{where}: a label is 1-64 letters, digits, '_' or '-'")
        if not isinstance(spec, dict):
            raise SettingsError(f"{where} must be an object")
        unknown = sorted(set(spec) - set(SERVER_FIELDS))
        if unknown:
            raise SettingsError(f"{where}: unknown field {unknown[0]!r} (known: "
                                f"{', '.join(SERVER_FIELDS)})")
        kind = spec.get("type", spec.get("transport"))
        if ("command" in spec) == ("url" in spec):
            raise SettingsError(f"{where}: give either command (a stdio server) or url")
        if "command" in spec:
            args = spec.get("args", [])
            if not isinstance(spec["command"], str) or not spec["command"] or \
                    not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise SettingsError(f"{where}: command must be a string and args a list of "
                                    "strings")
            if kind not in (None, "stdio"):
                raise SettingsError(f"{where}.type: a command runs over stdio")
            cwd = spec.get("cwd")
            if cwd is not None and not isinstance(cwd, str):
                raise SettingsError(f"{where}.cwd must be a string")
            servers[label] = ConfiguredServer(
                label, "stdio", command=spec["command"], args=tuple(args), cwd=cwd,
                env=_strings(spec["env"], f"{where}.env") if "env" in spec else None)
            continue
        url = spec["url"]
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
            raise SettingsError(f"{where}.url must be an http(s) URL")
        if kind in (None, "http", "streamable-http", "streamable_http", "streamableHttp"):
            kind = "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "http"
        elif kind != "sse":
            raise SettingsError(f"{where}.type must be stdio, http (streamable HTTP) or sse")
        servers[label] = ConfiguredServer(
            label, kind, url=url,
            headers=_strings(spec["headers"], f"{where}.headers") if "headers" in spec
            else {})
    return servers


def load_config(path: str | None) -> dict[str, ConfiguredServer]:
    if path is None:
        return {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SettingsError(f"{CONFIG_FLAG} {path}: {exc.strerror or exc}") from None
    return parse_config(text, path)


@attrs.frozen
class McpLimits:
    """The operator's MCP settings (docs/configuration.md)."""

    servers: dict[str, ConfiguredServer] = attrs.Factory(dict)
    urls: FetchRule = FetchRule()
    timeout: float = 60.0             # one listing or call, in seconds
    max_calls: int = 20               # calls one response may run
    max_output_bytes: int = 1 << 20   # a call's output, as the model is given it

    @property
    def enabled(self) -> bool:
        return bool(self.servers or self.urls.entries)


@attrs.frozen
class Target:
    """Where one of a request's servers is, and how it is reached. Credentials stay here."""

    label: str
    identity: str                         # the configured label, or the URL sans credentials
    configured: ConfiguredServer | None
    url: str | None = attrs.field(default=None, repr=False)
    headers: dict[str, str] = attrs.field(factory=dict, repr=False)
    rules: tuple[FetchRule, ...] = ()     # the URL's host rules (a per-request URL)

    def key(self, caller: Caller) -> ConnectionKey:
        digest = hashlib.sha256(json.dumps([self.url, sorted(self.headers.items())])
                                .encode()).hexdigest()
        return ConnectionKey(caller.scope, self.identity, digest, label=self.label)


class McpService:
    """One for the process: every tenant's MCP servers, through one pool."""

    def __init__(self, limits: McpLimits, pool: McpPoolHandle | None) -> None:
        self.limits = limits
        self._pool = pool

    @property
    def enabled(self) -> bool:
        return self.limits.enabled and self._pool is not None

    # ---- a request's servers -----------------------------------------------------------

    def target(self, caller: Caller, server: McpServer) -> Target:
        """Where `server` is, if this caller may reach it; a 400 naming
        `tools[i].server_url` (or `.server_label`) if not."""
        tenant = caller.tenant
        if server.url is None:
            configured = self.limits.servers.get(server.label)
            if configured is None or (tenant.mcp_servers is not None
                                      and server.label not in tenant.mcp_servers):
                raise InvalidRequest(
                    f"'{server.param}' names no server_url, and '{server.label}' is not a "
                    "server this server's operator configured (--mcp-config) for this key",
                    param=f"{server.param}.server_url")
            headers = {**configured.headers, **server.credentials()}
            return Target(server.label, f"config:{server.label}", configured,
                          configured.url, headers)
        where = f"{server.param}.server_url"
        found = [self.limits.urls] + ([FetchRule(tuple(tenant.mcp_urls))]
                                      if tenant.mcp_urls is not None else [])
        parts = urlsplit(server.url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise InvalidRequest("the URL's port is invalid", param=where) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidRequest("server_url must be an http(s) URL", param=where)
        if not self.limits.urls.entries:
            raise InvalidRequest("this server reaches no MCP server by URL (--mcp-urls is not "
                                 "set); use a configured server_label", param=where)
        if any(rule.match(parts.hostname, port) is None for rule in found):
            raise InvalidRequest(f"reaching MCP servers at {parts.hostname} is not allowed "
                                 "(--mcp-urls, or this key's mcp_urls)", param=where)
        headers = dict(server.credentials())
        if parts.username is not None:
            headers.setdefault("Authorization", _basic(parts.username, parts.password or ""))
        return Target(server.label, rules.without_credentials(server.url), None, server.url,
                      headers, tuple(found))

    async def check_url(self, target: Target, param: str) -> None:
        """A per-request URL's host resolves to addresses its rules allow (a 400 if not).
        Every connection checks again (`_CheckedBackend`): this is the early, named 400."""
        if target.url is None or not target.rules:
            return
        parts = urlsplit(target.url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            await _resolve(host, port, target.rules)
        except MediaError as exc:
            raise InvalidRequest(exc.reason, param=f"{param}.server_url") from None

    async def turn(self, caller: Caller, servers: Sequence[McpServer],
                   history: Sequence[Item], given: Sequence[Item], *, soft: bool) -> McpTools:
        """A turn's MCP servers: each listed (or its listing reused from `history`), their
        tools, the approvals in the input (`given`, within `history`) resolved, and the
        runner. A listing that fails is a 424; `soft` (a stream or a background job): the
        response fails with it instead, after its `mcp_list_tools.failed`."""
        targets = {s.label: self.target(caller, s) for s in servers}
        for server in servers:
            await self.check_url(targets[server.label], server.param)
        reused = rules.listings(history)
        fetched: list[McpListToolsItem] = []
        failure = None
        tools, approvals = [], {}
        shown: set[tuple[str, str]] = set()
        for server in servers:
            listing = reused.get(server.label)
            if listing is None:
                listing = await self._list(caller, targets[server.label])
                fetched.append(listing)
                if listing.error is not None:
                    failure = listing.error
                    if not soft:
                        raise ExternalConnectorError(listing.error)
                    break
            for tool in rules.tools_of(server, listing):
                tools.append(tool)
                shown.add((server.label, tool.name))
                annotations = next((t.get("annotations") for t in listing.tools
                                    if t["name"] == tool.name), None)
                approvals[tool.chat_name] = server.needs_approval(tool.name, annotations)
        approved = _approved(history, given, shown) if failure is None else []
        rendered = {i.id: f"{i.server_label}.{i.name}" for i in history
                    if isinstance(i, McpApprovalRequestItem)}
        runner = Runner(self, caller, targets)
        turn = McpTurn(runner, fetched, failure, approved, rendered)
        return McpTools(tools, [s.echoed for s in servers], approvals, turn)

    # ---- listing and calling -----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _session(self, caller: Caller, target: Target) -> AsyncIterator[Any]:
        assert self._pool is not None
        async with self._pool.session(target.key(caller),
                                      lambda: _open(target, self.limits)) as session:
            yield session

    async def _list(self, caller: Caller, target: Target) -> McpListToolsItem:
        """The server's tools, as an `mcp_list_tools` item (with `error` when it failed)."""
        assert self._pool is not None
        tools: list[dict[str, Any]] = []
        error = None
        try:
            with trio.fail_after(self.limits.timeout):
                async with self._session(caller, target) as session:
                    cursor = None
                    for _ in range(LIST_PAGES):
                        page = await session.list_tools(cursor=cursor)
                        tools += [_listed(t) for t in page.tools]
                        cursor = page.next_cursor
                        if not cursor:
                            break
        except trio.TooSlowError:
            error = (f"Error retrieving tool list from MCP server: '{target.label}': no "
                     f"answer within {self.limits.timeout:g} s")
        except Exception as exc:   # whatever the server or the network did: a failed listing
            error = (f"Error retrieving tool list from MCP server: '{target.label}': "
                     f"{describe(exc)}")
        await self._pool.record(target.label, "listing", error is None)
        if error is not None:
            log.info("mcp: %s", error)
        return McpListToolsItem(id=new_id("mcpl"), server_label=target.label,
                                tools=[] if error else tools, error=error)

    async def call(self, caller: Caller, target: Target, name: str, arguments: str
                   ) -> tuple[str | None, dict[str, Any] | None]:
        """Runs one call: (output, None), or (None, error) with OpenAI's error shapes."""
        assert self._pool is not None
        from mcp.shared.exceptions import MCPError

        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            return None, _protocol(-32602, "the arguments are not a JSON object")
        started = trio.current_time()
        output: str | None = None
        error: dict[str, Any] | None = None
        try:
            async with self._session(caller, target) as session:
                try:
                    with trio.fail_after(self.limits.timeout):
                        result = await session.call_tool(name, args)
                except trio.TooSlowError:
                    error = _protocol(TIMEOUT_CODE, f"the call took more than "
                                      f"{self.limits.timeout:g} s; it was cancelled")
                except MCPError as exc:
                    error = _protocol(exc.code, exc.error.message)
                else:
                    output, error = self._result(result)
        except Exception as exc:   # the connection failed under the call
            error = _transport(exc)
        seconds = trio.current_time() - started
        await self._pool.record(target.label, "call", error is None, seconds)
        return output, error

    def _result(self, result: Any) -> tuple[str | None, dict[str, Any] | None]:
        content = [block.model_dump(mode="json", exclude_none=True) for block in result.content]
        if result.is_error:
            return None, {"type": "mcp_tool_execution_error", "content": content}
        texts = [b.get("text", "") if b.get("type") == "text" else json.dumps(b)
                 for b in content]
        if not texts and result.structured_content is not None:
            texts = [json.dumps(result.structured_content, ensure_ascii=False)]
        output = "\n".join(texts)
        size = len(output.encode())
        if size > self.limits.max_output_bytes:
            return None, _protocol(-32000, f"the tool's output is {size} bytes, over this "
                                   f"server's limit of {self.limits.max_output_bytes} "
                                   "(--mcp-max-output-bytes)")
        return output, None


@attrs.frozen
class Runner:
    """One response's MCP calls, on the servers its request named, with its credentials."""

    service: McpService
    caller: Caller
    targets: dict[str, Target] = attrs.field(repr=False)

    @property
    def max_calls(self) -> int:
        return self.service.limits.max_calls

    async def call(self, label: str, name: str, arguments: str
                   ) -> tuple[str | None, dict[str, Any] | None]:
        return await self.service.call(self.caller, self.targets[label], name, arguments)


def _approved(history: Sequence[Item], given: Sequence[Item], shown: set[tuple[str, str]]
              ) -> list[McpApprovalRequestItem]:
    """The approval requests the input approves that have not run yet (each once). An
    approval of an unknown request is a 400 naming its input item; so is one of a tool this
    request does not offer (its server not sent again, or the tool not in its
    `allowed_tools`): `shown` holds the (label, tool) pairs it offers."""
    requests = {i.id: i for i in history if isinstance(i, McpApprovalRequestItem)}
    ran = {i.approval_request_id for i in history if isinstance(i, McpCallItem)}
    approved: dict[str, McpApprovalRequestItem] = {}
    for i, item in enumerate(given):
        if not isinstance(item, McpApprovalResponseItem):
            continue
        request = requests.get(item.approval_request_id)
        if request is None:
            raise InvalidRequest(f"No mcp_approval_request found with id "
                                 f"'{item.approval_request_id}'.",
                                 param=f"input[{i}].approval_request_id")
        if not item.approve or request.id in ran:
            continue
        if (request.server_label, request.name) not in shown:
            raise InvalidRequest(f"the approved call is '{request.name}' of the MCP server "
                                 f"'{request.server_label}': send its mcp tool again in tools, "
                                 "with the tool allowed", param=f"input[{i}]")
        approved.setdefault(request.id, request)
    return list(approved.values())


def _listed(tool: Any) -> dict[str, Any]:
    annotations = tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True) \
        if tool.annotations is not None else None
    return {"name": tool.name, "input_schema": tool.input_schema,
            "description": tool.description, "annotations": annotations}


def _protocol(code: int, message: str) -> dict[str, Any]:
    return {"type": "mcp_protocol_error", "code": code, "message": message}


def _transport(exc: BaseException) -> dict[str, Any]:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        return {"type": "http_error", "code": status, "message": describe(exc)}
    return _protocol(-32000, f"the connection to the MCP server failed: {describe(exc)}")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# ---- connections ------------------------------------------------------------------------

async def _resolve(host: str, port: int, found: Iterable[FetchRule]) -> str:
    """The address to connect to, if every rule allows `host` there (a MediaError if not)."""
    matches = [rule.match(host, port) for rule in found]
    if any(m is None for m in matches):
        raise MediaError(f"reaching {host} is not allowed (--mcp-urls)")
    how = "exact" if all(m == "exact" for m in matches) else "wildcard"
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise MediaError(f"cannot resolve {host}: {exc}") from None
    return checked_addresses(host, [str(info[4][0]) for info in infos], how,
                             flag="--mcp-urls")[0]


def _http_client(target: Target, limits: McpLimits, headers: dict[str, str]) -> Any:
    """An httpx2 client for one server: its headers, and for a per-request URL every
    connection checked against the URL rules at the address it connects to."""
    import httpx2

    timeout = httpx2.Timeout(limits.timeout, read=max(limits.timeout, 300.0))
    transport = _checked_transport(target.rules) if target.rules else None
    return httpx2.AsyncClient(headers=headers, timeout=timeout, transport=transport,
                              follow_redirects=False, trust_env=False)


def _checked_transport(found: tuple[FetchRule, ...]) -> Any:
    import httpcore2
    import httpx2
    from httpcore2._backends.auto import AutoBackend

    class CheckedBackend(httpcore2.AsyncNetworkBackend):
        """Connects only where the rules allow, to the address it checked (no second
        resolution a rebinding DNS could answer differently)."""

        def __init__(self) -> None:
            self._inner = AutoBackend()

        async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                              local_address: str | None = None,
                              socket_options: Any = None) -> Any:
            try:
                address = await _resolve(host, port, found)
            except MediaError as exc:
                raise httpcore2.ConnectError(exc.reason) from None
            return await self._inner.connect_tcp(address, port, timeout=timeout,
                                                 local_address=local_address,
                                                 socket_options=socket_options)

        async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                      socket_options: Any = None) -> Any:
            raise httpcore2.ConnectError("unix sockets are not reached by URL")

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    class CheckedTransport(httpx2.AsyncHTTPTransport):
        def __init__(self) -> None:
            super().__init__(trust_env=False)
            self._pool = httpcore2.AsyncConnectionPool(
                ssl_context=ssl.create_default_context(), network_backend=CheckedBackend())

    return CheckedTransport()


@contextlib.asynccontextmanager
async def _open(target: Target, limits: McpLimits) -> AsyncIterator[Any]:
    """A session with the server (the `mcp` SDK's client), open for the block."""
    from mcp import Client
    from mcp.client.sse import sse_client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    configured = target.configured
    if configured is not None and configured.transport == "stdio":
        assert configured.command is not None
        params = StdioServerParameters(command=configured.command, args=list(configured.args),
                                       env=configured.env, cwd=configured.cwd)
        async with Client(params, cache=None) as client:
            yield client
        return
    assert target.url is not None
    sse = configured.transport == "sse" if configured is not None \
        else urlsplit(target.url).path.rstrip("/").endswith("/sse")
    url = rules.without_credentials(target.url)
    if sse:
        def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> Any:
            return _http_client(target, limits, {**(headers or {}), **target.headers})

        async with Client(sse_client(url, httpx_client_factory=factory), cache=None) as client:
            yield client
        return
    async with _http_client(target, limits, target.headers) as http:
        transport = streamable_http_client(url, http_client=http,
                                           max_sse_event_size=limits.max_output_bytes * 2)
        async with Client(transport, cache=None) as client:
            yield client
