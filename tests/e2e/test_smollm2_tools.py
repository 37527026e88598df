"""Tools on a real model whose chat template has none: SmolLM2-135M-Instruct, served without
`--tool-format`, gets triode's generic envelope (docs/tools.md). Forced calls validate and
stream, and Open Responses' `function-call-roundtrip` passes. Greedy and short: this CPU
decodes it at tens of tokens a second."""

from __future__ import annotations

import json

import jsonschema
import pytest

from ..conftest import run_server
from .smollm2 import NAME, ensure_smollm2

GREEDY = {"temperature": 0.0}
# Open Responses' tool (src/lib/compliance-tests.ts, `function-call-roundtrip`).
GET_WEATHER = {
    "type": "function", "name": "get_weather",
    "description": "Get the current weather for a location",
    "parameters": {"type": "object", "properties": {"location": {
        "type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
        "required": ["location"]}}
STRICT_WEATHER = {
    **GET_WEATHER, "strict": True,
    "parameters": {"type": "object", "additionalProperties": False,
                   "required": ["location", "unit"], "properties": {
                       "location": {"type": "string", "maxLength": 40},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}
CONVERT = {
    "type": "function", "name": "convert_currency", "strict": True,
    "description": "Convert an amount of money from one currency to another",
    "parameters": {"type": "object", "additionalProperties": False,
                   "required": ["amount", "from_currency", "to_currency"], "properties": {
                       "amount": {"type": "number"},
                       "from_currency": {"type": "string", "maxLength": 3},
                       "to_currency": {"type": "string", "maxLength": 3}}}}


@pytest.fixture(scope="module")
def smol():
    ensure_smollm2()
    with run_server("--model", NAME) as s:
        yield s


def calls_of(response) -> list:
    return [item for item in response.output if item.type == "function_call"]


def test_a_forced_named_call_streams_and_validates(smol):
    """A named tool_choice: one function_call item, its arguments streamed as deltas that
    join to the final arguments, which validate against the strict schema; no markup in
    the text."""
    events = []
    with smol.client().responses.stream(
            model=NAME, input="What's the weather like in Paris, in celsius?",
            tools=[STRICT_WEATHER], tool_choice={"type": "function", "name": "get_weather"},
            parallel_tool_calls=False, max_output_tokens=48, **GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert final.status == "completed"
    [call] = calls_of(final)
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), STRICT_WEATHER["parameters"])
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) > 1 and "".join(deltas) == call.arguments
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done.arguments == call.arguments
    assert final.output_text == ""
    types = [e.type for e in events]
    assert types.index("response.output_item.added") < types.index(
        "response.function_call_arguments.delta") < types.index("response.output_item.done")


def test_a_required_call_is_one_of_the_tools(smol):
    """tool_choice required with two tools: a call to one of them, arguments valid."""
    resp = smol.client().responses.create(
        model=NAME, input="How much is 100 US dollars in euros?",
        tools=[STRICT_WEATHER, CONVERT], tool_choice="required", parallel_tool_calls=False,
        max_output_tokens=64, **GREEDY)
    assert resp.status == "completed"
    [call] = calls_of(resp)
    schema = {"get_weather": STRICT_WEATHER, "convert_currency": CONVERT}[call.name]
    jsonschema.validate(json.loads(call.arguments), schema["parameters"])


def test_the_function_call_round_trip(smol):
    """Open Responses' `function-call-roundtrip`, its requests as it sends them (greedy
    here, for a repeatable run): a forced get_weather call, then its output back through
    previous_response_id, answered by a completed response with output."""
    client = smol.client()
    first = client.responses.create(
        model=NAME, input="Use the weather tool to get the temperature in San Francisco.",
        tools=[GET_WEATHER], tool_choice={"type": "function", "name": "get_weather"}, **GREEDY)
    assert first.status == "completed"
    calls = calls_of(first)
    assert calls and all(c.name == "get_weather" for c in calls)
    jsonschema.validate(json.loads(calls[0].arguments), GET_WEATHER["parameters"])
    second = client.responses.create(
        model=NAME, previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                "output": "64 degrees and clear"}], **GREEDY)
    assert second.status == "completed" and second.output


def test_the_next_turn_reuses_the_call_as_generated(smol):
    """The call is rendered back as the text the model generated, so a tool loop that sends
    its tools again reuses the whole first turn from the prompt cache."""
    client = smol.client()
    first = client.responses.create(
        model=NAME, input="What's the weather like in Paris, in celsius?",
        tools=[STRICT_WEATHER], tool_choice="required", parallel_tool_calls=False,
        max_output_tokens=48, **GREEDY)
    [call] = calls_of(first)
    second = client.responses.create(
        model=NAME, previous_response_id=first.id, tools=[STRICT_WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id,
                "output": "18 degrees, sunny"}], max_output_tokens=24, **GREEDY)
    assert second.status in ("completed", "incomplete") and second.output
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached >= first.usage.input_tokens + first.usage.output_tokens - 1, (
        first.usage, second.usage)
