"""The Open Responses specification's streaming rules (docs/conformance.md) that no other test
pins: the SSE framing, the fields of an item's first event, the incomplete item, extension
event names, allowed_tools, and the keep-alive a `[DONE]` frame would cost."""

from __future__ import annotations

import json

import httpx
import openai

from .test_generation import ADD, WEATHER
from .test_spine import MODEL

# Open Responses' required fields (schema/components/schemas: Message, FunctionCall,
# ReasoningBody, OutputTextContent), which the first event announcing one must all carry.
REQUIRED_ITEM_FIELDS = {
    "message": ("type", "id", "status", "role", "content"),
    "function_call": ("type", "id", "call_id", "name", "arguments", "status"),
    "reasoning": ("type", "id", "summary"),
}
REQUIRED_PART_FIELDS = {"output_text": ("type", "text", "annotations")}


def frames_of(text: str) -> list[list[str]]:
    """The SSE body as its frames, each a list of its lines."""
    assert text.endswith("\n\n"), text[-200:]
    return [block.split("\n") for block in text[:-2].split("\n\n")]


def streams(server) -> dict[str, str]:
    """SSE bodies of every kind: text, a tool call, an incomplete one, a stored replay and
    its tail."""
    def post(**body) -> str:
        r = server.http.post("/v1/responses", json={"model": MODEL, "stream": True, **body})
        assert r.status_code == 200 and r.headers["content-type"].startswith(
            "text/event-stream")
        return r.text

    bodies = {"text": post(input="Reply with: amber"),
              "call": post(input="Call get_weather with city=Oslo", tools=[WEATHER],
                           tool_choice="required", max_output_tokens=64),
              "incomplete": post(input="Reply with: silver 411 lake", max_output_tokens=2)}
    response_id = json.loads(frames_of(bodies["text"])[0][1].removeprefix("data: "))[
        "response"]["id"]
    for name, query in (("replay", ""), ("tail", "&starting_after=3")):
        r = server.http.get(f"/v1/responses/{response_id}?stream=true{query}")
        assert r.status_code == 200
        bodies[name] = r.text
    return bodies


def events_of(text: str) -> list[dict]:
    return [json.loads(frame[1].removeprefix("data: ")) for frame in frames_of(text)]


def test_sse_frames_are_an_event_line_naming_the_type_then_data_and_no_id(server):
    """Each SSE frame is `event: <type>` then `data: <json>` whose `type` is that name; no
    `id:` (Open Responses: servers SHOULD NOT use it), no other field, no `[DONE]` (the
    decision docs/conformance.md records), live and replayed alike."""
    for name, text in streams(server).items():
        for frame in frames_of(text):
            assert len(frame) == 2, (name, frame)
            event_line, data_line = frame
            assert event_line.startswith("event: ") and data_line.startswith("data: "), frame
            assert json.loads(data_line.removeprefix("data: "))["type"] == \
                event_line.removeprefix("event: "), (name, frame)
        assert "[DONE]" not in text and "\nid:" not in text and not text.startswith("id:")


def test_event_names_are_the_standard_ones_or_prefixed(server):
    """Every event type is a `response.*` event or `error`; triode's own are `mlx.`-prefixed
    (the seed's compaction events, test_compaction pins them)."""
    for text in streams(server).values():
        for event in events_of(text):
            assert event["type"].startswith(("response.", "mlx.")) or \
                event["type"] == "error", event


def test_an_items_first_event_carries_every_required_field(server):
    """`response.output_item.added` (and `content_part.added`) carry every field Open
    Responses requires of the item (and part), none of them null; the item is in_progress."""
    seen = set()
    for text in streams(server).values():
        for event in events_of(text):
            if event["type"] == "response.output_item.added":
                item = event["item"]
                seen.add(item["type"])
                for field in REQUIRED_ITEM_FIELDS[item["type"]]:
                    assert item.get(field) is not None, (field, item)
                assert item["status"] == "in_progress" or item["type"] == "reasoning"
            elif event["type"] == "response.content_part.added":
                for field in REQUIRED_PART_FIELDS[event["part"]["type"]]:
                    assert event["part"].get(field) is not None, (field, event)
    assert {"message", "function_call"} <= seen


def test_an_incomplete_item_is_the_last_and_its_response_is_incomplete(server):
    """A response cut off by max_output_tokens: its last item ends `incomplete`, nothing is
    announced after it, and the response ends `response.incomplete`."""
    events = events_of(streams(server)["incomplete"])
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert done[-1]["item"]["status"] == "incomplete"
    after = events[events.index(done[-1]) + 1:]
    assert [e["type"] for e in after] == ["response.incomplete"]
    final = after[0]["response"]
    assert final["status"] == "incomplete" and final["output"][-1]["status"] == "incomplete"


def test_allowed_tools_with_required_calls_only_a_listed_tool(client):
    """allowed_tools (mode required) is a hard constraint: the model is steered by the
    prompt to another declared tool, and calls the listed one."""
    resp = client.responses.create(
        model=MODEL, input="Call get_weather with city=Oslo", tools=[WEATHER, ADD],
        max_output_tokens=64, tool_choice={"type": "allowed_tools", "mode": "required",
                                           "tools": [{"type": "function",
                                                      "name": "add_numbers"}]})
    assert [item.name for item in resp.output if item.type == "function_call"] == [
        "add_numbers"]


def test_a_sync_openai_client_keeps_one_connection_across_streams(server):
    """openai-python's sync stream reads to the end of the body and keeps its connection: a
    `[DONE]` frame would end its read early and cost a new connection per stream (the
    reason docs/conformance.md gives for sending none)."""
    ports = set()

    def note_port(response: httpx.Response) -> None:
        ports.add(response.extensions["network_stream"].get_extra_info("client_addr")[1])

    http = httpx.Client(limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                        event_hooks={"response": [note_port]})
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-test",
                           max_retries=0, http_client=http)
    with http:
        for i in range(5):
            with client.responses.stream(model=MODEL, input=f"Reply with: w{i}") as stream:
                assert stream.get_final_response().status == "completed"
    assert len(ports) == 1
