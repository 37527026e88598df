"""The MCP loop a supervisor runs, over a scripted model (each generation's text given) and a
recording runner: which calls run, when the response ends, and what the next generation is
shown. The real servers, SDKs and model are tests/e2e/test_mcp.py's."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace
from typing import Any, AsyncIterator

import attrs
import trio

from triode.actors.supervisor import Supervisor
from triode.model.families import HERMES
from triode.model.loading import ModelInfo
from triode.model.request import Rendered, Sampling
from triode.responses.convert import structure
from triode.responses.ids import new_id
from triode.responses.mcp import McpTools, McpTurn, parse_server, tools_of
from triode.responses.objects import McpApprovalRequestItem, McpListToolsItem, plain
from triode.responses.prepared import finalize
from triode.responses.translate import plan
from triode.responses.wire import CreateResponse

INFO = ModelInfo(path="m", context_length=4096, eos_token_ids=(0,), vocab_size=8,
                 family=HERMES)
LISTING = McpListToolsItem(id="mcpl_1", server_label="calc", tools=[
    {"name": "add", "input_schema": {"type": "object", "properties": {}},
     "annotations": {"readOnlyHint": True}},
    {"name": "echo", "input_schema": {"type": "object", "properties": {}}}])
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def call(name: str, **arguments: Any) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


class ScriptedModel:
    """Generates each scripted text in turn (one output per character, then stop) and
    renders a prompt of one token per message, keeping every request and rendering."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.requests: list[Any] = []
        self.rendered: list[list[dict[str, Any]]] = []
        self.info = INFO

    @contextlib.asynccontextmanager
    async def generate(self, request: Any) -> AsyncIterator[Any]:
        self.requests.append(request)
        text = self.texts.pop(0)

        async def outputs() -> AsyncIterator[Any]:
            for i, ch in enumerate(text):
                await trio.sleep(0)
                yield SimpleNamespace(text=ch, logprobs=None, drafted=0, cached_tokens=0,
                                      error=None,
                                      finish_reason="stop" if i == len(text) - 1 else None)

        yield SimpleNamespace(outputs=outputs())

    async def render(self, messages: list[dict[str, Any]], tools: Any, kwargs: Any,
                     submits: bool = True) -> Rendered:
        self.rendered.append(messages)
        return Rendered(list(range(len(messages))), "")


@attrs.define
class Runner:
    max_calls: int = 20
    calls: list[tuple[str, str, str]] = attrs.Factory(list)
    gate: trio.Event | None = None

    async def call(self, label: str, name: str, arguments: str) -> tuple[str, None]:
        self.calls.append((label, name, arguments))
        if self.gate is not None:
            await self.gate.wait()
        return f"{name} ran", None


def supervisor(model: ScriptedModel, runner: Runner, *, approval: Any = "never",
               approved: list[McpApprovalRequestItem] | None = None, history: list[Any] = (),
               **fields: Any) -> Supervisor:
    server = parse_server({"type": "mcp", "server_label": "calc", "server_url": "http://x",
                           "require_approval": approval}, "tools[0]")
    tools = tools_of(server, LISTING)
    approvals = {t.chat_name: server.needs_approval(t.name, None) for t in tools}
    turn = McpTurn(runner, [LISTING], None, approved or [],
                   {i.id: f"{i.server_label}.{i.name}" for i in history
                    if isinstance(i, McpApprovalRequestItem)})
    req = structure({"model": "m", "input": "x", **fields}, CreateResponse)
    turn_plan = plan(req, Sampling(), list(history), family=HERMES,
                     mcp=McpTools(tools, [server.echoed], approvals, turn))
    ready = finalize(turn_plan, Rendered([1, 2, 3], ""), INFO)
    return Supervisor(response_id=new_id("resp"), plan=turn_plan, ready=ready,
                      model=model)   # type: ignore[arg-type]


async def run(sup: Supervisor) -> dict[str, Any]:
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        await sup.wait_done()
    return plain(sup.builder.obj)


async def test_calls_run_and_the_model_goes_on_until_it_answers():
    """Each generation's MCP calls run, and the next generation sees their results; the
    response completes when the model answers in text."""
    model = ScriptedModel(call("calc.add"), call("calc.echo"), "done")
    runner = Runner()
    obj = await run(supervisor(model, runner))
    assert obj["status"] == "completed"
    assert [i["type"] for i in obj["output"]] == ["mcp_list_tools", "mcp_call", "mcp_call",
                                                  "message"]
    assert [c[1] for c in runner.calls] == ["add", "echo"]
    last = model.rendered[-1]
    assert [m["role"] for m in last[-4:]] == ["assistant", "tool", "assistant", "tool"]
    assert last[-1]["content"] == "echo ran"
    assert obj["usage"]["input_tokens"] == sum(len(r.prompt) for r in model.requests)


async def test_a_client_call_in_the_same_turn_ends_the_response_after_the_mcp_calls():
    """An MCP call and a client function call together: the MCP call runs, then the
    response completes with the function call for the client; nothing more is generated."""
    model = ScriptedModel(call("calc.add") + call("get_weather", city="x"), "never reached")
    runner = Runner()
    obj = await run(supervisor(model, runner, tools=[WEATHER]))
    assert obj["status"] == "completed"
    assert [i["type"] for i in obj["output"]] == ["mcp_list_tools", "mcp_call", "function_call"]
    assert obj["output"][1]["status"] == "completed" and len(runner.calls) == 1
    assert len(model.requests) == 1


async def test_a_call_that_needs_approval_ends_the_response():
    """A call that waits becomes an mcp_approval_request and ends the response; a call of
    a tool that needs none, in the same turn, runs first."""
    model = ScriptedModel(call("calc.add", a=1) + call("calc.echo", text="t"), "never reached")
    runner = Runner()
    obj = await run(supervisor(model, runner,
                               approval={"never": {"tool_names": ["add"]}}))
    assert [i["type"] for i in obj["output"]] == ["mcp_list_tools", "mcp_call",
                                                  "mcp_approval_request"]
    assert obj["output"][2]["name"] == "echo"
    assert json.loads(obj["output"][2]["arguments"]) == {"text": "t"}
    assert [c[1] for c in runner.calls] == ["add"] and len(model.requests) == 1


async def test_max_tool_calls_counts_mcp_calls():
    """With max_tool_calls 2, the generation after the second call may call no more: its
    call is dropped, and the response ends."""
    model = ScriptedModel(call("calc.add"), call("calc.add"), call("calc.add") + "text")
    runner = Runner()
    obj = await run(supervisor(model, runner, max_tool_calls=2))
    assert len(runner.calls) == 2
    assert [i["type"] for i in obj["output"]].count("mcp_call") == 2
    assert obj["status"] == "completed"


async def test_the_per_response_cap_turns_tools_off():
    """At the runner's cap (--mcp-max-calls) the next generation is shown no tool choice:
    its call is dropped."""
    model = ScriptedModel(call("calc.add"), call("calc.add"))
    runner = Runner(max_calls=1)
    obj = await run(supervisor(model, runner))
    assert len(runner.calls) == 1 and obj["status"] == "completed"


async def test_an_approved_call_runs_first_and_renders_once():
    """A call approved in the input runs before anything is generated, with the
    request's arguments; the prompt then shows the request's call once, with its result."""
    request = McpApprovalRequestItem(id="mcpr_9", server_label="calc", name="echo",
                                     arguments='{"text": "hi"}')
    model = ScriptedModel("answer")
    runner = Runner()
    obj = await run(supervisor(model, runner, approval="always", approved=[request],
                               history=[request]))
    assert runner.calls == [("calc", "echo", '{"text": "hi"}')]
    assert obj["output"][1]["approval_request_id"] == "mcpr_9"
    messages = model.rendered[-1]
    calls = [c for m in messages for c in m.get("tool_calls", [])]
    assert [c["id"] for c in calls] == ["mcpr_9"]
    assert messages[-1] == {"role": "tool", "tool_call_id": "mcpr_9", "content": "echo ran",
                            "name": "calc.echo"}
    assert obj["status"] == "completed"


async def test_a_cancel_during_a_call_cancels_it():
    """Cancelled while its call runs: the call's task is cancelled, the response ends
    cancelled and the call incomplete."""
    model = ScriptedModel(call("calc.add"), "never reached")
    runner = Runner(gate=trio.Event())
    sup = supervisor(model, runner)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        while not runner.calls:
            await trio.sleep(0.001)
        sup.cancel()
        await sup.wait_done()
    obj = plain(sup.builder.obj)
    assert obj["status"] == "cancelled"
    assert obj["output"][1]["type"] == "mcp_call" and obj["output"][1]["status"] == "incomplete"
    assert sup.mcp_timeline[0][3] == "cancelled"
