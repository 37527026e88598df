"""MCP tools the server runs (`type: "mcp"`), end to end: a real MCP server (the `mcp`
package's, over streamable HTTP through hypercorn, and over stdio), a real triode on the
bundled model, the real `openai` SDK. Forced calls (`tool_choice: {"type": "mcp", ...}`) make
the tiny model's calls certain; what it writes after them is not asserted."""

from __future__ import annotations

import json
import http.server
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest

from ..conftest import Server, run_server, wait_until
from ..fixtures.mcp import (McpHttpServer, mcp_http_server, stdio_config, stdio_events,
                            stdio_processes)

MODEL = "triode-tiny"
KEY = "sk-mcp-main"
NARROW = "sk-mcp-narrow"
SECRET = "s3cret-token-4f9a1c"
URL_PASSWORD = "pw-7d2e0b"
NEVER = {"require_approval": "never"}


def forced(name: str | None = None, label: str = "calc") -> dict[str, Any]:
    choice: dict[str, Any] = {"type": "mcp", "server_label": label}
    return {**choice, "name": name} if name else choice


@pytest.fixture(scope="module")
def calc() -> Iterator[McpHttpServer]:
    with mcp_http_server() as server:
        yield server


class Redirect(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(307)
        self.send_header("Location", self.target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def redirect(calc) -> Iterator[str]:
    """An allowed host (127.0.0.1) that redirects to one that is not (localhost)."""
    Redirect.target = f"http://localhost:{calc.port}/mcp"
    host = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{host.server_address[1]}/mcp"
    finally:
        host.shutdown()


@pytest.fixture(scope="module")
def env(calc, tmp_path_factory) -> Iterator[tuple[Server, openai.OpenAI, Path, Path]]:
    """triode with MCP on: 127.0.0.1 by URL, `local` (stdio) and `calc` (HTTP) by label; a
    SQLite store and debug logs (the secrets test reads both); two tenants, the second
    narrowed to no configured server and no reachable URL host."""
    tmp = tmp_path_factory.mktemp("mcp")
    log = tmp / "stdio.log"
    config = stdio_config(tmp / "mcp.json", log, calc=calc.url)
    keys = tmp / "keys.json"
    keys.write_text(json.dumps({"tenants": {
        "main": {"keys": [KEY]},
        "narrow": {"keys": [NARROW], "mcp_servers": [], "mcp_urls": ["localhost"]}}}))
    db = tmp / "store.db"
    with run_server("--mcp-urls", "127.0.0.1", "--mcp-config", str(config),
                    "--mcp-timeout", "3", "--api-keys-file", str(keys),
                    "--store", f"sqlite:///{db}", "--log-level", "debug") as server:
        yield server, server.client(api_key=KEY), db, log


def tool(calc: McpHttpServer, **extra: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "calc", "server_url": calc.url, **extra}


def types_of(response: Any) -> list[str]:
    return [item.type for item in response.output]


def only(response: Any, kind: str) -> Any:
    found = [item for item in response.output if item.type == kind]
    assert len(found) == 1, types_of(response)
    return found[0]


# ---- the loop -------------------------------------------------------------------------------

def test_forced_call_runs_and_the_model_goes_on(env, calc):
    """A forced call: the server is listed, the call runs with the arguments the model wrote,
    and the same response goes on from its result, reusing the prompt cache."""
    _, client, _, _ = env
    before = calc.stats()
    r = client.responses.create(model=MODEL, input="Add two numbers.", tools=[tool(calc, **NEVER)],
                                tool_choice=forced("add"), max_output_tokens=120)
    assert r.status == "completed", r.error
    assert types_of(r)[:2] == ["mcp_list_tools", "mcp_call"]
    listing = r.output[0]
    assert listing.server_label == "calc" and listing.error is None
    assert {t.name for t in listing.tools} == {"add", "echo", "pick", "fail", "slow",
                                                "secret"}
    add = next(t for t in listing.tools if t.name == "add")
    assert add.input_schema["required"] == ["a", "b"] and add.annotations == {"readOnlyHint": True}
    call = r.output[1]
    args = json.loads(call.arguments)
    assert (call.name, call.server_label, call.status) == ("add", "calc", "completed")
    assert call.output == str(args["a"] + args["b"]) and call.error is None
    after = calc.stats()
    assert after["lists"] == before["lists"] + 1
    assert after["calls"].get("add", 0) == before["calls"].get("add", 0) + 1
    # Two generations, their prompts counted, the second's prefix served by the cache.
    assert r.usage.input_tokens_details.cached_tokens > 0
    assert r.tools[0].headers is None and r.tool_choice.name == "add"


def test_stream_events_follow_openais_order(env, calc):
    """The stream's MCP events come as OpenAI sends them: a listing is added empty,
    in_progress, completed, done with its tools; a call is added with empty arguments,
    in_progress, its argument deltas, arguments done, completed, done with its output."""
    _, client, _, _ = env
    events = list(client.responses.create(
        model=MODEL, input="Echo something.", tools=[tool(calc, **NEVER)],
        tool_choice=forced("echo"), max_output_tokens=80, stream=True))
    names = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    start = names.index("response.output_item.added")
    assert names[:start] == ["response.created", "response.in_progress"]
    assert names[start:start + 4] == [
        "response.output_item.added", "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed", "response.output_item.done"]
    assert events[start].item.tools == [] and len(events[start + 3].item.tools) == 6
    call = start + 4
    assert events[call].type == "response.output_item.added"
    assert events[call].item.type == "mcp_call" and events[call].item.arguments == ""
    assert names[call + 1] == "response.mcp_call.in_progress"
    done = names.index("response.mcp_call_arguments.done")
    deltas = events[call + 2:done]
    assert deltas and {e.type for e in deltas} == {"response.mcp_call_arguments.delta"}
    assert "".join(e.delta for e in deltas) == events[done].arguments
    assert names[done + 1:done + 3] == ["response.mcp_call.completed",
                                        "response.output_item.done"]
    finished = events[done + 2].item
    assert finished.status == "completed"
    assert finished.output == json.loads(events[done].arguments)["text"]
    assert names[-1] == "response.completed"
    assert events[-1].response.output[1].model_dump() == finished.model_dump()


def test_a_listing_is_reused_across_a_chain_and_from_the_input(env, calc):
    """The server sees one tools/list for a chain of three responses, and none for a
    request that carries the listing in its input."""
    _, client, _, _ = env
    before = calc.stats()["lists"]
    first = client.responses.create(model=MODEL, input="Add.", tools=[tool(calc, **NEVER)],
                                    tool_choice=forced("add"), max_output_tokens=60)
    second = client.responses.create(model=MODEL, input="Again.", tools=[tool(calc, **NEVER)],
                                     tool_choice=forced("add"), max_output_tokens=60,
                                     previous_response_id=first.id)
    third = client.responses.create(model=MODEL, input="Once more.",
                                    tools=[tool(calc, **NEVER)], tool_choice=forced("echo"),
                                    max_output_tokens=60, previous_response_id=second.id)
    assert types_of(first)[0] == "mcp_list_tools"
    assert "mcp_list_tools" not in types_of(second) + types_of(third)
    assert only(third, "mcp_call").status == "completed"
    replayed = client.responses.create(
        model=MODEL, tools=[tool(calc, **NEVER)], tool_choice=forced("add"),
        max_output_tokens=60,
        input=[first.output[0].model_dump(exclude_none=True),
               {"role": "user", "content": "Add again."}])
    assert "mcp_list_tools" not in types_of(replayed)
    assert only(replayed, "mcp_call").status == "completed"
    assert calc.stats()["lists"] == before + 1


def test_approval_round_trip_runs_the_call_exactly_once(env, calc):
    """Without require_approval every call waits: the response ends with an
    mcp_approval_request; approving it runs the call once (with the request's arguments);
    approving it again runs nothing."""
    _, client, _, _ = env
    first = client.responses.create(model=MODEL, input="Add.", tools=[tool(calc)],
                                    tool_choice=forced("add"), max_output_tokens=60)
    assert first.status == "completed"
    assert types_of(first) == ["mcp_list_tools", "mcp_approval_request"]
    request = first.output[1]
    assert request.name == "add" and json.loads(request.arguments).keys() == {"a", "b"}
    before = calc.stats()["calls"].get("add", 0)
    approve = {"type": "mcp_approval_response", "approval_request_id": request.id,
               "approve": True}
    second = client.responses.create(model=MODEL, previous_response_id=first.id,
                                     tools=[tool(calc)], input=[approve],
                                     max_output_tokens=60)
    assert second.status == "completed", second.error
    call = second.output[0]
    assert (call.type, call.approval_request_id, call.arguments) == \
        ("mcp_call", request.id, request.arguments)
    args = json.loads(request.arguments)
    assert call.output == str(args["a"] + args["b"])
    again = client.responses.create(model=MODEL, previous_response_id=second.id,
                                    tools=[tool(calc)], input=[approve], max_output_tokens=30)
    assert again.status == "completed" and "mcp_call" not in types_of(again)
    assert calc.stats()["calls"].get("add", 0) == before + 1


def test_a_denied_call_is_not_run(env, calc):
    """A denial runs nothing; the response goes on without the call."""
    _, client, _, _ = env
    first = client.responses.create(model=MODEL, input="Echo.", tools=[tool(calc)],
                                    tool_choice=forced("echo"), max_output_tokens=60)
    request = only(first, "mcp_approval_request")
    before = calc.stats()["calls"].get("echo", 0)
    denied = client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=[tool(calc)], max_output_tokens=30,
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id,
                "approve": False, "reason": "not now"}])
    # What the tiny model writes after a denial (and how long) is not the point.
    assert denied.error is None and "mcp_call" not in types_of(denied)
    assert calc.stats()["calls"].get("echo", 0) == before


def test_approval_errors_name_the_input_item(env, calc):
    """An unknown approval id is a 400 naming it; approving a call whose server is not in
    this request's tools is a 400 naming the item (credentials are never replayed)."""
    _, client, _, _ = env
    first = client.responses.create(model=MODEL, input="Add.", tools=[tool(calc)],
                                    tool_choice=forced("add"), max_output_tokens=60)
    request = only(first, "mcp_approval_request")
    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.create(model=MODEL, previous_response_id=first.id, tools=[tool(calc)],
                                input=[{"type": "mcp_approval_response",
                                        "approval_request_id": "mcpr_unknown", "approve": True}])
    assert unknown.value.body["param"] == "input[0].approval_request_id"
    with pytest.raises(openai.BadRequestError) as untooled:
        client.responses.create(model=MODEL, previous_response_id=first.id,
                                input=[{"role": "user", "content": "ok"},
                                       {"type": "mcp_approval_response",
                                        "approval_request_id": request.id, "approve": True}])
    assert untooled.value.body["param"] == "input[1]"


def test_require_approval_filters_and_allowed_tools(env, calc):
    """`never` for the read-only tools runs add at once while echo waits; allowed_tools
    hides what it leaves out (a forced call of a hidden tool is a 400), though the listing
    keeps every tool."""
    _, client, _, _ = env
    policy = {"require_approval": {"never": {"read_only": True}}}
    ran = client.responses.create(model=MODEL, input="Add.", tools=[tool(calc, **policy)],
                                  tool_choice=forced("add"), max_output_tokens=60)
    assert "mcp_call" in types_of(ran)
    waits = client.responses.create(model=MODEL, input="Echo.", tools=[tool(calc, **policy)],
                                    tool_choice=forced("echo"), max_output_tokens=60)
    assert types_of(waits) == ["mcp_list_tools", "mcp_approval_request"]
    narrowed = tool(calc, allowed_tools={"tool_names": ["echo"]}, **NEVER)
    chosen = client.responses.create(model=MODEL, input="Use a tool.", tools=[narrowed],
                                     tool_choice=forced(), max_output_tokens=60)
    assert only(chosen, "mcp_call").name == "echo"
    assert len(chosen.output[0].tools) == 6
    with pytest.raises(openai.BadRequestError) as hidden:
        client.responses.create(model=MODEL, input="Add.", tools=[narrowed],
                                tool_choice=forced("add"))
    assert hidden.value.body["param"] == "tool_choice.name"


def test_a_tool_that_raises_is_an_execution_error(env, calc):
    """The tool's exception comes back as the call's mcp_tool_execution_error (failed) and
    the response completes: the model was given the error."""
    _, client, _, _ = env
    r = client.responses.create(model=MODEL, input="Fail.", tools=[tool(calc, **NEVER)],
                                tool_choice=forced("fail"), max_output_tokens=60)
    call = only(r, "mcp_call")
    assert r.status == "completed" and call.status == "failed" and call.output is None
    assert call.error.type == "mcp_tool_execution_error"
    assert "failed on purpose" in json.dumps(call.error.content)


def test_a_server_that_is_down_is_a_424_or_a_failed_stream(env, calc):
    """A listing that fails: a 424 external_connector_error, and nothing is created; in a
    stream, mcp_list_tools.failed then response.failed."""
    server, client, _, _ = env
    down = {"type": "mcp", "server_label": "gone", "server_url": "http://127.0.0.1:9/mcp"}
    with pytest.raises(openai.APIStatusError) as exc:
        client.responses.create(model=MODEL, input="hi", tools=[down])
    assert exc.value.status_code == 424
    assert exc.value.body["code"] == "external_connector_error"
    assert "'gone'" in exc.value.body["message"]
    events = list(client.responses.create(model=MODEL, input="hi", tools=[down], stream=True))
    names = [e.type for e in events]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.mcp_list_tools.in_progress", "response.mcp_list_tools.failed",
                     "response.output_item.done", "response.failed"]
    final = events[-1].response
    assert final.error.code == "external_connector_error"
    assert final.output[0].error and final.output[0].tools == []
    assert server.http.get(f"/v1/responses/{final.id}",
                           headers={"Authorization": f"Bearer {KEY}"}).json()["status"] == \
        "failed"


def test_a_slow_tool_times_out_and_the_server_sees_the_cancel(env, calc):
    """Past --mcp-timeout (3 s) the call is cancelled on the server and the model is given
    the timeout as the call's error."""
    _, client, _, _ = env
    before = calc.stats()["cancelled"]
    started = time.monotonic()
    r = client.responses.create(model=MODEL, input="Wait.", tools=[tool(calc, **NEVER)],
                                tool_choice=forced("slow"), max_output_tokens=60)
    call = only(r, "mcp_call")
    assert call.status == "failed" and call.error.type == "mcp_protocol_error"
    assert call.error.code == -32001 and "3 s" in call.error.message
    assert time.monotonic() - started < 30
    wait_until(lambda: calc.stats()["cancelled"] == before + 1, timeout=10)


def test_cancelling_a_response_cancels_its_call(env, calc):
    """A background response cancelled while its call runs: the server sees the call
    cancelled, and the response ends cancelled with the call incomplete."""
    server, client, _, _ = env
    before = calc.stats()
    job = client.responses.create(model=MODEL, input="Wait.", tools=[tool(calc, **NEVER)],
                                  tool_choice=forced("slow"), max_output_tokens=60,
                                  background=True)
    wait_until(lambda: calc.stats()["calls"].get("slow", 0) > before["calls"].get("slow", 0),
               timeout=30)
    cancelled = client.responses.cancel(job.id)
    assert cancelled.status == "cancelled"
    wait_until(lambda: calc.stats()["cancelled"] == before["cancelled"] + 1, timeout=10)
    final = client.responses.retrieve(job.id)
    assert final.status == "cancelled"
    assert only(final, "mcp_call").status == "incomplete"


# ---- where a request may reach --------------------------------------------------------------

@pytest.mark.parametrize("body,param", [
    ({"server_url": "http://localhost:1/mcp"}, "tools[0].server_url"),   # not in --mcp-urls
    ({"server_url": "ftp://127.0.0.1/mcp"}, "tools[0].server_url"),
    ({"connector_id": "connector_gmail"}, "tools[0].connector_id"),
    ({"tunnel_id": "t1"}, "tools[0].tunnel_id"),
    ({}, "tools[0].server_url"),                                           # no such label
    ({"server_url": "http://127.0.0.1:1/mcp", "server_label": "bad label"},
     "tools[0].server_label"),
])
def test_urls_outside_the_rules_are_400s_naming_the_field(env, body, param):
    _, client, _, _ = env
    declared = {"type": "mcp", "server_label": "x", **body}
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model=MODEL, input="hi", tools=[declared])
    assert exc.value.body["param"] == param


def test_a_redirect_to_a_host_not_allowed_is_not_followed(env, calc, redirect):
    """An allowed host that redirects elsewhere: the listing fails (424), and the server
    behind the redirect is never asked."""
    _, client, _, _ = env
    before = calc.stats()["lists"]
    with pytest.raises(openai.APIStatusError) as exc:
        client.responses.create(model=MODEL, input="hi", tools=[
            {"type": "mcp", "server_label": "moved", "server_url": redirect}])
    assert exc.value.status_code == 424
    assert calc.stats()["lists"] == before


def test_a_tenant_is_narrowed_by_its_keys_file_entry(env, calc):
    """The narrowed tenant reaches neither 127.0.0.1 by URL nor the configured servers."""
    server, _, _, _ = env
    narrow = server.client(api_key=NARROW)
    for declared, param in (({"server_url": calc.url}, "tools[0].server_url"),
                            ({"server_label": "local"}, "tools[0].server_url")):
        with pytest.raises(openai.BadRequestError) as exc:
            narrow.responses.create(model=MODEL, input="hi", tools=[
                {"type": "mcp", "server_label": "calc", **declared}])
        assert exc.value.body["param"] == param


def test_a_configured_stdio_server_by_label(env):
    """`local` (stdio, from --mcp-config) is listed and called by its label alone, through
    one connection (one child process) for two requests."""
    _, client, _, log = env
    declared = {"type": "mcp", "server_label": "local", **NEVER}
    for _ in range(2):
        r = client.responses.create(model=MODEL, input="Add.", tools=[declared],
                                    tool_choice=forced("add", "local"), max_output_tokens=60)
        assert only(r, "mcp_call").status == "completed"
    events = stdio_events(log)
    assert [e["event"] for e in events].count("list") == 2
    assert [e.get("name") for e in events if e["event"] == "call"] == ["add", "add"]
    assert len(stdio_processes(log)) == 1


# ---- everywhere the rest works --------------------------------------------------------------

def test_background_job_runs_its_calls(env, calc):
    """A background job lists, calls and goes on; its stored object has the items."""
    _, client, _, _ = env
    job = client.responses.create(model=MODEL, input="Add.", tools=[tool(calc, **NEVER)],
                                  tool_choice=forced("add"), max_output_tokens=60,
                                  background=True)
    final = wait_until(lambda: (r := client.responses.retrieve(job.id)).status in
                       ("completed", "failed", "incomplete") and r, timeout=60)
    assert final.status == "completed"
    assert types_of(final)[:2] == ["mcp_list_tools", "mcp_call"]


def test_a_conversation_keeps_the_items_and_the_listing(env, calc):
    """A conversation's items hold the listing and the call; its next turn lists nothing."""
    _, client, _, _ = env
    conversation = client.conversations.create()
    before = calc.stats()["lists"]
    for text in ("Add.", "Add again."):
        r = client.responses.create(model=MODEL, input=text, conversation=conversation.id,
                                    tools=[tool(calc, **NEVER)], tool_choice=forced("add"),
                                    max_output_tokens=60)
        assert only(r, "mcp_call").status == "completed"
    kinds = [i.type for i in client.conversations.items.list(conversation.id, order="asc")]
    assert kinds.count("mcp_list_tools") == 1 and kinds.count("mcp_call") == 2
    assert calc.stats()["lists"] == before + 1


def test_the_websocket_mode_runs_calls(env, calc):
    """Over responses.connect(), the same events and a completed call."""
    _, client, _, _ = env
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="Add.", tools=[tool(calc, **NEVER)],
                             tool_choice=forced("add"), max_output_tokens=60)
        names = []
        for event in conn:
            names.append(event.type)
            if event.type in ("response.completed", "response.failed", "error"):
                break
    assert "response.mcp_call.completed" in names and names[-1] == "response.completed"


def test_metrics_and_the_access_log_count_calls(env, calc):
    """/metrics counts calls, failures and listings per server label; the access line of a
    response that ran calls says how many."""
    server, client, _, _ = env
    r = client.responses.create(model=MODEL, input="Add.", tools=[tool(calc, **NEVER)],
                                tool_choice=forced("add"), max_output_tokens=60)
    assert only(r, "mcp_call").status == "completed"
    text = server.http.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    figures = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line.startswith("triode_mcp_")}
    assert figures['triode_mcp_calls_total{server_label="calc"}'] >= 1
    assert figures['triode_mcp_listings_total{server_label="calc"}'] >= 1
    assert 'triode_mcp_call_failures_total{server_label="calc"}' in figures
    assert figures['triode_mcp_call_seconds_total{server_label="calc"}'] > 0
    assert figures["triode_mcp_connections"] >= 1
    wait_until(lambda: any(f"response={r.id}" in line and "mcp_calls=1" in line
                           for line in server.log), timeout=10)


def test_the_live_page_shows_a_responses_calls(env, calc):
    """/ui's snapshot lists a finished response's MCP calls (tool, times, status)."""
    server, client, _, _ = env
    r = client.responses.create(model=MODEL, input="Add.", tools=[tool(calc, **NEVER)],
                                tool_choice=forced("add"), max_output_tokens=60)
    snapshot = server.http.get("/ui/events", headers={"Authorization": f"Bearer {KEY}"})
    entry = next(e for e in snapshot.json()["recent"] if e["id"] == r.id)
    [shown] = entry["mcp_calls"]
    assert shown["tool"] == "calc.add" and shown["status"] == "completed"
    assert shown["ended_at"] >= shown["started_at"]


def test_secrets_are_never_stored_logged_or_echoed(env, calc):
    """Headers, authorization and URL credentials reach the server, and nothing else: not
    the response (streamed or stored), its input items, the SQLite store's file, the
    server's debug log or the live page."""
    server, client, db, _ = env
    before = len(calc.stats()["authorization"])
    url = calc.url.replace("http://", f"http://user:{URL_PASSWORD}@")
    declared = {"type": "mcp", "server_label": "calc", "server_url": url,
                "headers": {"X-Api-Key": SECRET}, "authorization": SECRET, **NEVER}
    r = client.responses.create(model=MODEL, input="Who am I?", tools=[declared],
                                tool_choice=forced("secret"), max_output_tokens=60)
    assert only(r, "mcp_call").output == "authorized"
    assert calc.stats()["authorization"][before:] == [f"Bearer {SECRET}"]
    stream = server.http.post("/v1/responses", headers={"Authorization": f"Bearer {KEY}"},
                              json={"model": MODEL, "input": "Again.", "tools": [declared],
                                    "tool_choice": forced("secret"), "stream": True,
                                    "max_output_tokens": 60}).text
    auth = {"Authorization": f"Bearer {KEY}"}
    bodies = [r.model_dump_json(), stream,
              server.http.get(f"/v1/responses/{r.id}", headers=auth).text,
              server.http.get(f"/v1/responses/{r.id}?stream=true", headers=auth).text,
              server.http.get(f"/v1/responses/{r.id}/input_items", headers=auth).text,
              server.http.get("/ui/events", headers=auth).text]
    assert r.tools[0].server_url == calc.url
    time.sleep(0.5)   # the access log line and the store's writes
    for where, text in [*enumerate(bodies), ("log", "".join(server.log)),
                        ("store", b"".join(p.read_bytes() for p in db.parent.glob("store.db*"))
                         .decode("latin-1"))]:
        assert SECRET not in text and URL_PASSWORD not in text, where


def test_the_agents_sdk_hosted_mcp_tool_with_an_approval_callback(env, calc):
    """The Agents SDK's HostedMCPTool, unmodified: the approval callback is asked, the
    SDK sends the approval, and the call runs once on the server."""
    import asyncio

    from agents import (Agent, HostedMCPTool, ModelSettings, OpenAIResponsesModel,
                        RunConfig, Runner, set_tracing_disabled)
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    server, _, _, _ = env
    asked: list[str] = []

    def approve(request: Any) -> dict[str, Any]:
        asked.append(request.data.name)
        return {"approve": True}

    hosted = HostedMCPTool(tool_config={"type": "mcp", "server_label": "calc",
                                        "server_url": calc.url, "require_approval": "always",
                                        "allowed_tools": ["add"]},
                           on_approval_request=approve)
    before = calc.stats()["calls"].get("add", 0)

    async def main() -> Any:
        client = AsyncOpenAI(base_url=server.base_url + "/v1", api_key=KEY, max_retries=0)
        agent = Agent(name="calc", tools=[hosted],
                      model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                      model_settings=ModelSettings(tool_choice="required",
                                                   max_tokens=60))
        return await Runner.run(agent, "Add two numbers.", max_turns=3,
                                run_config=RunConfig(tracing_disabled=True))

    result = asyncio.run(main())
    assert asked == ["add"]
    kinds = [item.type for item in result.new_items]
    assert "mcp_approval_request_item" in kinds and "mcp_approval_response_item" in kinds
    assert calc.stats()["calls"].get("add", 0) == before + 1


def test_shutdown_ends_stdio_servers_and_a_wildcard_reaches_no_private_address(
        calc, tmp_path):
    """A server's stdio children end with it. Under `--mcp-urls '*'` a loopback URL is a
    400 naming it: a wildcard reaches public addresses only."""
    log = tmp_path / "stdio.log"
    config = stdio_config(tmp_path / "mcp.json", log)
    with run_server("--mcp-config", str(config), "--mcp-urls", "*") as server:
        with pytest.raises(openai.BadRequestError) as exc:
            server.client().responses.create(model=MODEL, input="hi", tools=[tool(calc)])
        assert exc.value.body["param"] == "tools[0].server_url"
        assert "private address" in exc.value.body["message"]
        r = server.client().responses.create(
            model=MODEL, input="Add.", tools=[{"type": "mcp", "server_label": "local", **NEVER}],
            tool_choice=forced("add", "local"), max_output_tokens=40)
        assert only(r, "mcp_call").status == "completed"
        assert len(stdio_processes(log)) == 1
    wait_until(lambda: not stdio_processes(log), timeout=15)


def test_mcp_flags_without_the_sdk_name_the_extra(tmp_path):
    """--mcp-urls on a Python without the mcp package stops the start with one line naming
    triode[mcp]."""
    import subprocess
    import sys

    blocker = tmp_path / "mcp.py"
    blocker.write_text("raise ImportError('not installed')\n")
    done = subprocess.run([sys.executable, "-m", "triode", "serve", "--port", "0",
                           "--mcp-urls", "example.com"], capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)},
                          timeout=60)
    assert done.returncode != 0
    assert "triode[mcp]" in done.stderr and "Traceback" not in done.stderr


def test_off_by_default_an_mcp_tool_is_dropped(server, client, calc):
    """Without --mcp-config or --mcp-urls, an mcp tool is a hosted tool: dropped (and named
    in X-Triode-Dropped-Tools); the server is never reached; an approval is a 400."""
    before = calc.stats()["lists"]
    raw = httpx.post(f"{server.base_url}/v1/responses", timeout=60, json={
        "model": MODEL, "input": "Reply with: ok", "max_output_tokens": 10,
        "tools": [{"type": "mcp", "server_label": "calc", "server_url": calc.url}]})
    assert raw.status_code == 200 and raw.headers["x-triode-dropped-tools"] == "mcp"
    assert calc.stats()["lists"] == before
    with pytest.raises(openai.BadRequestError) as exc:   # nothing here could act on it
        client.responses.create(model=MODEL, input=[
            {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "calc",
             "name": "add", "arguments": "{}"},
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1",
             "approve": True}])
    assert exc.value.body["param"] == "input[1]"


def test_a_chain_on_redis_reuses_its_listing_and_a_background_job_runs(calc, redis_prefix):
    """On a Redis store: the chain's listing is read back from Redis (one tools/list for
    two responses), and a background job runs its call."""
    from ..conftest import REDIS_URL

    with run_server("--mcp-urls", "127.0.0.1", "--store", REDIS_URL,
                    "--store-prefix", redis_prefix) as server:
        client = server.client()
        before = calc.stats()["lists"]
        first = client.responses.create(model=MODEL, input="Add.", tools=[tool(calc, **NEVER)],
                                        tool_choice=forced("add"), max_output_tokens=60)
        job = client.responses.create(model=MODEL, input="Again.", background=True,
                                      previous_response_id=first.id,
                                      tools=[tool(calc, **NEVER)], tool_choice=forced("echo"),
                                      max_output_tokens=60)
        final = wait_until(lambda: (r := client.responses.retrieve(job.id)).status in
                           ("completed", "failed", "incomplete") and r, timeout=60)
        assert final.status == "completed"
        assert only(final, "mcp_call").status == "completed"
        assert "mcp_list_tools" not in types_of(final)
        assert calc.stats()["lists"] == before + 1


def test_a_fixture_family_runs_a_forced_call(calc, tmp_path_factory):
    """Llama 3's format (random weights of the real architecture): the forced call is
    parsed from the family's own syntax and runs on the server (`pick`: its enum argument
    ends the call; random weights would write digits forever)."""
    from ..fixtures.families import FAMILIES, build

    directory = build(FAMILIES["llama3"], tmp_path_factory.mktemp("llama3"))
    with run_server("--model", str(directory), "--mcp-urls", "127.0.0.1") as server:
        r = server.client().responses.create(
            model=str(directory), input="Add.", tools=[tool(calc, **NEVER)],
            tool_choice=forced("pick"), temperature=0, max_output_tokens=120)
    call = only(r, "mcp_call")
    color = json.loads(call.arguments)["color"]
    assert call.status == "completed" and call.output == f"picked {color}"


def test_a_config_file_that_cannot_be_used_stops_the_start(tmp_path):
    """A bad --mcp-config is one line naming the file and the key."""
    import subprocess
    import sys

    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"x": {"command": "a", "url": "http://h"}}}))
    done = subprocess.run([sys.executable, "-m", "triode", "serve", "--port", "0",
                           "--mcp-config", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"--mcp-config {path}: mcpServers.x" in done.stderr


def test_an_sse_server_by_url(env):
    """A server on the older SSE transport (a URL whose path ends in /sse) is listed and
    called as a streamable-HTTP one is."""
    _, client, _, _ = env
    with mcp_http_server("sse") as sse:
        declared = {"type": "mcp", "server_label": "old", "server_url": sse.url, **NEVER}
        r = client.responses.create(model=MODEL, input="Add.", tools=[declared],
                                    tool_choice=forced("add", "old"), max_output_tokens=60)
        call = only(r, "mcp_call")
        args = json.loads(call.arguments)
        assert call.status == "completed" and call.output == str(args["a"] + args["b"])
        assert sse.stats()["lists"] == 1 and sse.stats()["calls"] == {"add": 1}


def test_the_live_page_draws_a_call_while_it_runs_and_after(env, calc):
    """In a browser: a running call shows in its response's live row with its time so
    far; once the response ends, its recent row shows the call, timed, and how it ended."""
    from .browser import browser, page_on

    server, client, _, _ = env
    with browser() as context, page_on(context, server.base_url + "/ui", key=KEY) as (
            page, errors):
        page.wait_for_selector("#conn[data-state=live]")
        job = client.responses.create(model=MODEL, input="Wait.", background=True,
                                      tools=[tool(calc, **NEVER)], tool_choice=forced("slow"),
                                      max_output_tokens=40)
        page.wait_for_selector(f"#live tr[data-id='{job.id}'] td.mcp:has-text('calc.slow "
                               "running')", timeout=20_000)
        cell = page.locator(f"#recent tr[data-id='{job.id}'] td.mcp")
        cell.wait_for(timeout=30_000)
        text = cell.inner_text()
        assert text.startswith("calc.slow ") and text.endswith("✗ failed"), text
        assert errors == []
