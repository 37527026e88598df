"""The model families people run, each on a fixture model of its real architecture
(tests/fixtures/families.py), through a real server and the openai SDK: forced calls in the
family's own format come back as the call asked for, with arguments that validate and the
stream's events in order; a tool round trip with an agent's developer and mid-conversation
system messages renders back; structured output holds. Random weights write garbage, so
only structure is asserted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import openai
import pytest

from ..conftest import Server, completed, run_server
from ..fixtures.families import FAMILIES, Family, build

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "additionalProperties": False,
                          "required": ["city", "days"], "properties": {
                              "city": {"type": "string", "maxLength": 8},
                              "days": {"type": "integer", "minimum": 1, "maximum": 9}}}}
TIME = {"type": "function", "name": "get_time", "description": "The time in a zone.",
        "parameters": {"type": "object", "additionalProperties": False, "required": ["zone"],
                       "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}}}
SCHEMAS = {t["name"]: t["parameters"] for t in (WEATHER, TIME)}
ANSWER = {"type": "object", "additionalProperties": False, "required": ["answer", "n"],
          "properties": {"answer": {"type": "string", "maxLength": 8},
                         "n": {"type": "integer", "minimum": 0, "maximum": 9}}}
# Families whose template opens reasoning unless told not to; random weights would reason
# until the token limit, so the tests turn it off (tests/model covers forced calls after it).
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory) -> Iterator[tuple[Family, Server, openai.OpenAI, str]]:
    """One server per family, shared by the module's tests."""
    f = FAMILIES[request.param]
    directory = build(f, tmp_path_factory.mktemp(f.name))
    with run_server("--model", str(directory)) as server:
        yield f, server, server.client(), str(directory)


def call_items(response: Any) -> list[Any]:
    return [item for item in response.output if item.type == "function_call"]


def test_forced_named_call_streams_in_order(family):
    """A named tool_choice: the stream opens one function_call item, carries its arguments
    (as deltas for the formats that stream them, in one piece for the others), closes it and
    completes; the call is the tool asked for and its arguments validate."""
    f, _, client, model = family
    events = list(client.responses.create(
        model=model, input="What is the weather in Paris?", tools=[WEATHER, TIME],
        tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=False,
        max_output_tokens=200, stream=True, extra_body=NO_THINKING))
    types = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert types == ["response.created", "response.in_progress", "response.output_item.added",
                     *["response.function_call_arguments.delta"] * len(deltas),
                     "response.function_call_arguments.done", "response.output_item.done",
                     "response.completed"]
    assert (len(deltas) > 1) if f.streamed else (len(deltas) == 1)
    final = events[-1].response
    [call] = call_items(final)
    assert call.name == "get_weather" and call.status == "completed"
    assert "".join(d.delta for d in deltas) == call.arguments == events[-2].item.arguments
    assert events[-3].arguments == call.arguments
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    assert final.output_text == ""


def test_required_call_is_one_of_the_tools(family):
    """tool_choice required: a call to one of the declared tools, arguments valid."""
    _, _, client, model = family
    response = client.responses.create(
        model=model, input="Anything.", tools=[WEATHER, TIME], tool_choice="required",
        parallel_tool_calls=False, max_output_tokens=200, extra_body=NO_THINKING)
    assert response.status == "completed"
    [call] = call_items(response)
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_tool_round_trip_with_agent_messages_renders(family):
    """The call goes back with its output, a developer message and a mid-conversation
    system message (templates that refuse them get them merged): a 200, chained and resent
    whole alike."""
    _, _, client, model = family
    first = client.responses.create(
        model=model, input=[{"role": "developer", "content": "Use the tools."},
                            {"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
        max_output_tokens=200, extra_body=NO_THINKING)
    [call] = call_items(first)
    turn = [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21"},
            {"role": "system", "content": "The user is in a hurry."},
            {"role": "developer", "content": "Answer in one word."}]
    chained = client.responses.create(
        model=model, previous_response_id=first.id, input=turn, tools=[WEATHER],
        max_output_tokens=4, extra_body=NO_THINKING)
    assert chained.status in ("completed", "incomplete")
    assert chained.usage.input_tokens > first.usage.input_tokens
    resent = client.responses.create(
        model=model, tools=[WEATHER], max_output_tokens=4, store=False, extra_body=NO_THINKING,
        input=[{"role": "developer", "content": "Use the tools."},
               {"role": "user", "content": "Weather in Paris?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": call.arguments}, *turn])
    assert resent.status in ("completed", "incomplete")
    assert resent.usage.input_tokens == chained.usage.input_tokens


def test_structured_output_validates(family):
    """text.format json_schema: the reply text is JSON that validates, in every format."""
    _, _, client, model = family
    response = client.responses.create(
        model=model, input="Answer.", max_output_tokens=200, extra_body=NO_THINKING,
        text={"format": {"type": "json_schema", "name": "answer", "schema": ANSWER,
                         "strict": True}})
    assert response.status == "completed"
    jsonschema.validate(json.loads(response.output_text), ANSWER)


# ---- the overrides ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory) -> Path:
    return build(FAMILIES["qwen3"], tmp_path_factory.mktemp("qwen3"))


def test_chat_template_flag_replaces_the_template_and_its_format(qwen3_dir, tmp_path):
    """--chat-template: the file's template renders the prompt and names the format (a GLM
    template makes a Qwen3 model's forced calls GLM's, whole)."""
    template = tmp_path / "glm.jinja"
    template.write_text(FAMILIES["glm"].template)
    with run_server("--model", str(qwen3_dir), "--chat-template", str(template)) as server:
        client = server.client()
        events = list(client.responses.create(
            model=str(qwen3_dir), input="Weather?", tools=[WEATHER], tool_choice="required",
            parallel_tool_calls=False, max_output_tokens=200, stream=True, extra_body=NO_THINKING))
        deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
        assert len(deltas) == 1
        [call] = call_items(events[-1].response)
        jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
        count = server.http.post("/v1/responses/input_tokens", json={
            "model": str(qwen3_dir), "input": "hi"}).json()["input_tokens"]
        assert count > 0


def test_tool_format_flag_overrides_detection(qwen3_dir):
    """--tool-format none: the model has no call format, so a forced call is a 400 that says
    so, instead of text that looks like a call."""
    with run_server("--model", str(qwen3_dir), "--tool-format", "none") as server:
        r = server.http.post("/v1/responses", json={
            "model": str(qwen3_dir), "input": "hi", "tools": [WEATHER],
            "tool_choice": "required"})
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "tool_choice"


@pytest.mark.parametrize("flags,line", [
    (["--tool-format", "bogus"], "triode: --tool-format must be one of "),
    (["--chat-template", "/no/such/template.jinja"],
     "triode: --chat-template: /no/such/template.jinja: No such file or directory"),
])
def test_bad_override_is_one_line_at_startup(flags, line):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "triode", "serve", *flags],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert [t for t in done.stderr.splitlines() if t.strip()][-1].startswith(line)




@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_forced_call_ends_the_turn_with_parallel_calls_allowed(family, stream):
    """parallel_tool_calls left at its default (true): a named tool_choice is one call of that
    tool and then the end of the turn, well within 200 tokens (the grammar let random weights
    write call after call until the limit)."""
    _, _, client, model = family
    request = dict(model=model, input="What is the weather in Paris?", tools=[WEATHER, TIME],
                   tool_choice={"type": "function", "name": "get_weather"},
                   max_output_tokens=200, extra_body=NO_THINKING)
    final = completed(client, stream=stream, **request)
    assert final.status == "completed"
    [call] = call_items(final)
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    # `required` with parallel calls: at most as many calls as tools offered, then the end.
    required = client.responses.create(**{**request, "tool_choice": "required"})
    assert required.status == "completed" and 1 <= len(call_items(required)) <= 2
