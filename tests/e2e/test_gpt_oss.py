"""gpt-oss through a real server: `triode serve --model` on the gpt_oss fixture (mlx-lm's own
architecture, random weights, harmony tokenizer and template), driven by the openai SDK.
Random weights write garbage, so these assert on structure, never on content."""

from __future__ import annotations

import json
from typing import Any, Iterator

import jsonschema
import pytest

from tests.conftest import Server, completed, run_server
from tests.fixtures.gpt_oss import build_gpt_oss
from triode.model.parsers.harmony import _KNOWN as HARMONY_TOKENS

WEATHER = {"type": "object", "properties": {
               "city": {"type": "string", "enum": ["Paris", "Rome"]},
               "days": {"type": "integer", "minimum": 1, "maximum": 9}},
           "required": ["city", "days"], "additionalProperties": False}
TOOLS: list[Any] = [
    {"type": "function", "name": "get_weather", "description": "The weather in a city.",
     "parameters": WEATHER, "strict": True},
    {"type": "function", "name": "get_time", "description": "The time somewhere.",
     "parameters": {"type": "object", "properties": {"zone": {"type": "string",
                                                             "enum": ["UTC", "CET"]}},
                    "required": ["zone"], "additionalProperties": False}},
]
SCHEMAS = {t["name"]: t["parameters"] for t in TOOLS}


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory) -> Iterator[Server]:
    directory = build_gpt_oss(tmp_path_factory.mktemp("gpt-oss"))
    with run_server("--model", str(directory)) as server:
        yield server


@pytest.fixture(scope="module")
def client(gpt_oss):
    return gpt_oss.client()


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def no_markup(text: str) -> bool:
    return not any(token in text for token in HARMONY_TOKENS)


def test_a_forced_call_streams_in_order_and_validates(client, model):
    """tool_choice required: the output's one call is to a declared tool, with arguments
    valid against its schema, and its events come in the SDK's order: output_item.added,
    function_call_arguments.delta..., .done, output_item.done (a reasoning item before it
    streams reasoning_text deltas)."""
    stream = client.responses.create(model=model, input="Weather in Paris for 3 days?",
                                     tools=TOOLS, tool_choice="required", temperature=0,
                                     max_output_tokens=200, stream=True)
    events = list(stream)
    assert events[-1].type == "response.completed"
    final = events[-1].response
    calls = [item for item in final.output if item.type == "function_call"]
    assert len(calls) == 1 and [i.type for i in final.output][-1] == "function_call"
    call = calls[0]
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    index = [i.id for i in final.output].index(call.id)
    mine = [e.type for e in events if getattr(e, "output_index", None) == index]
    assert mine[0] == "response.output_item.added" and mine[-1] == "response.output_item.done"
    assert mine[-2] == "response.function_call_arguments.done"
    assert set(mine[1:-2]) == {"response.function_call_arguments.delta"}
    deltas = "".join(e.delta for e in events
                     if e.type == "response.function_call_arguments.delta")
    assert deltas == call.arguments   # the grammar writes the canonical layout
    for item in final.output[:index]:
        assert item.type == "reasoning" and no_markup(item.content[0].text)
        kinds = [e.type for e in events if getattr(e, "item_id", None) == item.id]
        assert "response.reasoning_text.delta" in kinds
        assert kinds.index("response.reasoning_text.done") > kinds.index(
            "response.reasoning_text.delta")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_named_choice_calls_that_tool(client, model, stream):
    """Parallel calls allowed (the default): the one call ends the turn, `completed`."""
    request = dict(model=model, input="What time is it?", tools=TOOLS,
                   tool_choice={"type": "function", "name": "get_time"}, temperature=0,
                   max_output_tokens=120)
    response = completed(client, stream=stream, **request)
    assert response.status == "completed"
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_time"
    jsonschema.validate(json.loads(call.arguments), SCHEMAS["get_time"])


def test_a_tool_round_trip_renders_back(client, model):
    """The call and its output go back (chained and resent whole): the turn renders in
    harmony and is answered, with no markup in the text."""
    first = client.responses.create(model=model, input="Weather in Rome?", tools=TOOLS,
                                    tool_choice="required", temperature=0, max_output_tokens=120)
    (call,) = [item for item in first.output if item.type == "function_call"]
    output = {"type": "function_call_output", "call_id": call.call_id,
              "output": json.dumps({"temperature": 21})}
    chained = client.responses.create(model=model, previous_response_id=first.id,
                                      input=[output], tools=TOOLS, temperature=0,
                                      max_output_tokens=40)
    resent = client.responses.create(
        model=model, tools=TOOLS, temperature=0, max_output_tokens=40,
        input=[{"role": "user", "content": "Weather in Rome?"},
               *[item.model_dump(exclude_none=True) for item in first.output], output])
    for response in (chained, resent):
        assert response.status in ("completed", "incomplete")
        assert response.usage.input_tokens > first.usage.input_tokens
        assert no_markup(response.output_text)
    assert chained.usage.input_tokens == resent.usage.input_tokens


def test_structured_output_is_valid_json(client, model):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                                "n": {"type": "integer", "minimum": 0,
                                                      "maximum": 99}},
              "required": ["ok", "n"], "additionalProperties": False}
    response = client.responses.create(
        model=model, input="Answer in JSON.", temperature=0, max_output_tokens=120,
        text={"format": {"type": "json_schema", "name": "answer", "schema": schema,
                         "strict": True}})
    assert response.status == "completed"
    jsonschema.validate(json.loads(response.output_text), schema)


@pytest.mark.parametrize("seed", range(4))
def test_free_text_never_shows_markup(client, model, seed):
    """Sampled garbage with harmony's special tokens in it: none of them reaches
    output_text or the reasoning, streamed or stored."""
    stream = client.responses.create(model=model, input="Say something.", temperature=1.5,
                                     max_output_tokens=120, stream=True,
                                     extra_body={"seed": seed}, tools=TOOLS)
    events = list(stream)
    shown = "".join(getattr(e, "delta", "") for e in events
                    if e.type in ("response.output_text.delta",
                                  "response.reasoning_text.delta"))
    assert no_markup(shown)
    final = events[-1].response
    assert no_markup(final.output_text)
    for item in final.output:
        if item.type == "reasoning":
            assert no_markup(item.content[0].text)


def test_a_tool_loop_reuses_the_whole_previous_turn(client, model):
    """The next prompt of a tool loop is the last prompt, then what the model generated
    (analysis and call, as the renderer writes them back), then the output: all of the
    previous turn comes from the prompt cache. (gpt-oss's sliding-window layers make the
    cache all or nothing: it is reused only when the new prompt extends it exactly. The
    forced call's tokens here are the tokenizer's own encoding of what they spell.)"""
    clock = [{"type": "function", "name": "get_time", "description": "The time.",
              "parameters": {"type": "object", "properties": {},
                             "additionalProperties": False}}]
    first = client.responses.create(model=model, input="What time is it?", tools=clock,
                                    tool_choice={"type": "function", "name": "get_time"},
                                    temperature=0, max_output_tokens=120)
    (call,) = [item for item in first.output if item.type == "function_call"]
    second = client.responses.create(
        model=model, previous_response_id=first.id, tools=clock, temperature=0,
        max_output_tokens=5,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "noon"}])
    assert second.usage.input_tokens_details.cached_tokens == \
        first.usage.input_tokens + first.usage.output_tokens
