"""The generation surface end to end: tools, tool_choice, reasoning, structured output,
logprobs and sampling extras, with the openai SDK against the bundled model."""

from __future__ import annotations

import json

import pydantic
import pytest

from triode.responses.tools import HOSTED_TYPES

from ..conftest import run_server, wait_until
from .test_spine import MODEL, error_of, sse_events

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
ADD = {"type": "function", "name": "add_numbers",
       "parameters": {"type": "object", "properties": {"x": {"type": "integer"},
                                                       "y": {"type": "integer"}},
                      "required": ["x", "y"]}}


def calls_of(resp):
    return [item for item in resp.output if item.type == "function_call"]


def test_tool_loop(client):
    """Call → the client runs the tool → function_call_output → the final answer."""
    first = client.responses.create(model=MODEL, input="Call get_weather with city=Paris",
                                    tools=[WEATHER])
    call, = calls_of(first)
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    assert call.id.startswith("fc_") and call.call_id.startswith("call_")
    assert first.output_text == ""
    second = client.responses.create(model=MODEL, tools=[WEATHER], previous_response_id=first.id,
                                     input=[{"type": "function_call_output",
                                             "call_id": call.call_id, "output": "sunny 21"}])
    assert second.output_text == "The result is sunny 21."


def test_tool_loop_stateless_and_streamed(client):
    """The same loop with the full history sent back, streamed; deltas build the arguments."""
    history = [{"role": "user", "content": "Call add_numbers with x=3 and y=4"}]
    with client.responses.stream(model=MODEL, input=history, tools=[ADD]) as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        first = stream.get_final_response()
    call, = calls_of(first)
    assert json.loads(call.arguments) == {"x": 3, "y": 4}
    assert "".join(deltas) == call.arguments
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "7"})
    second = client.responses.create(model=MODEL, input=history, tools=[ADD], stream=False)
    assert second.output_text == "The result is 7."


def test_two_parallel_calls_and_parallel_false(client):
    """Two calls when asked for two; parallel_tool_calls false yields at most one."""
    prompt = "Call get_weather with city=Rome, then call add_numbers with x=1 and y=2"
    both = client.responses.create(model=MODEL, input=prompt, tools=[WEATHER, ADD])
    assert [c.name for c in calls_of(both)] == ["get_weather", "add_numbers"]
    one = client.responses.create(model=MODEL, input=prompt, tools=[WEATHER, ADD],
                                  parallel_tool_calls=False)
    assert [c.name for c in calls_of(one)] == ["get_weather"]
    assert one.parallel_tool_calls is False


def test_tool_choice_required_forces_a_call(client):
    """tool_choice required makes a call even for a prompt that would not make one."""
    plain = client.responses.create(model=MODEL, input="Reply with: hello", tools=[WEATHER])
    assert calls_of(plain) == [] and plain.output_text == "hello"
    forced = client.responses.create(model=MODEL, input="Reply with: hello", tools=[WEATHER],
                                     tool_choice="required", max_output_tokens=64)
    call, = calls_of(forced)
    assert call.name == "get_weather" and isinstance(json.loads(call.arguments)["city"], str)


def test_tool_choice_named_and_none(client):
    """A named choice calls exactly that tool; none makes no call."""
    named = client.responses.create(model=MODEL, input="Call get_weather with city=Oslo",
                                    tools=[WEATHER, ADD], max_output_tokens=64,
                                    tool_choice={"type": "function", "name": "add_numbers"})
    assert [c.name for c in calls_of(named)] == ["add_numbers"]
    none = client.responses.create(model=MODEL, input="Reply with: quiet", tools=[WEATHER],
                                   tool_choice="none")
    assert calls_of(none) == [] and none.tool_choice == "none"


@pytest.mark.parametrize("choice,param", [
    ("required", "tool_choice"),
    ({"type": "function", "name": "nope"}, "tool_choice.name"),
])
def test_impossible_tool_choice_is_400(server, choice, param):
    """required with no tools, or a named tool that is not declared, is a 400."""
    r = server.http.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                "tool_choice": choice})
    assert r.status_code == 400 and error_of(r)["param"] == param


def test_custom_tool_round_trip(client):
    """A custom tool call comes back as custom_tool_call with raw input, and its output feeds
    the next turn."""
    patch = {"type": "custom", "name": "apply_patch", "description": "Apply a patch."}
    first = client.responses.create(model=MODEL, input="Call apply_patch with input=abc123",
                                    tools=[patch],
                                    tool_choice={"type": "custom", "name": "apply_patch"})
    call, = [i for i in first.output if i.type == "custom_tool_call"]
    assert (call.name, call.input) == ("apply_patch", "abc123")
    second = client.responses.create(model=MODEL, tools=[patch], previous_response_id=first.id,
                                     input=[{"type": "custom_tool_call_output",
                                             "call_id": call.call_id, "output": "applied"}])
    assert second.output_text == "The result is applied."


def test_undeclared_tool_name_comes_back_as_a_plain_function_call(client):
    """A call to a tool the request did not declare is returned as a function_call with its
    arguments as generated, so the client can report the error."""
    resp = client.responses.create(model=MODEL, input="Call get_weather with city=Lima",
                                   tools=[ADD])
    call, = calls_of(resp)
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Lima"})


def test_namespace_call_keeps_namespace_and_name(client):
    """A namespaced function call comes back with namespace and name separate."""
    tools = [{"type": "namespace", "name": "files", "description": "file tools",
              "tools": [{"type": "function", "name": "read",
                         "parameters": {"type": "object",
                                        "properties": {"path": {"type": "string"}}}}]}]
    resp = client.responses.create(model=MODEL, input="Call files.read with path=notes",
                                   tools=tools, tool_choice={"type": "function", "name": "read",
                                                             "namespace": "files"})
    call, = [i.model_dump() for i in resp.output if i.type == "function_call"]
    assert (call["namespace"], call["name"]) == ("files", "read")
    assert json.loads(call["arguments"]) == {"path": "notes"}


def test_hosted_tools_are_dropped_by_default_and_named(server):
    """By default a request listing hosted tools (as Codex always does) is answered without
    them; the X-Triode-Dropped-Tools header names each dropped type once, and the echoed
    tools are the ones the model saw."""
    hosted = [{"type": kind} for kind in sorted(HOSTED_TYPES)]
    r = server.http.post("/v1/responses", json={
        "model": MODEL, "input": "Reply with: amber", "max_output_tokens": 16,
        "tools": [*hosted, {"type": "web_search"}, WEATHER]})
    assert r.status_code == 200, r.text
    assert r.headers["X-Triode-Dropped-Tools"].split(",") == sorted(HOSTED_TYPES)
    assert [t["name"] for t in r.json()["tools"]] == ["get_weather"]
    plain = server.http.post("/v1/responses", json={"model": MODEL, "input": "Reply with: amber",
                                                    "max_output_tokens": 4})
    assert "X-Triode-Dropped-Tools" not in plain.headers


def test_hosted_tools_error_refuses_every_hosted_type_by_name():
    """--hosted-tools error keeps the seed's strict 400, naming the tool and its param."""
    with run_server("--hosted-tools", "error") as strict:
        for kind in sorted(HOSTED_TYPES):
            r = strict.http.post("/v1/responses", json={
                "model": MODEL, "input": "x", "tools": [WEATHER, {"type": kind}]})
            assert r.status_code == 400 and kind in error_of(r)["message"], kind
            assert error_of(r)["param"] == "tools[1].type"


def test_reasoning_item_then_message_with_the_same_ids_in_stream_and_store(client, server):
    """<think> becomes a reasoning item before the message; ids match stream and store."""
    r = server.http.post("/v1/responses", json={
        "model": MODEL, "input": "Think, then reply with: violet", "stream": True})
    events = sse_events(r.text)
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["reasoning", "message"]
    reasoning, message = final["output"]
    assert message["content"][0]["text"] == "violet"
    assert "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta") \
        == reasoning["content"][0]["text"] != ""
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [reasoning["id"], message["id"]]
    stored = client.responses.retrieve(final["id"])
    assert [i.id for i in stored.output] == added
    assert stored.usage.output_tokens_details.reasoning_tokens > 0


def test_encrypted_reasoning_round_trip(client):
    """include reasoning.encrypted_content returns a blob that store:false replay accepts."""
    first = client.responses.create(model=MODEL, input="Think, then reply with: amber",
                                    include=["reasoning.encrypted_content"], store=False)
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    replay = [{"role": "user", "content": "Think, then reply with: amber"},
              {"type": "reasoning", "id": reasoning.id, "summary": [],
               "encrypted_content": reasoning.encrypted_content},
              *[i.model_dump(exclude_none=True) for i in first.output[1:]],
              {"role": "user", "content": "Repeat your first answer."}]
    again = client.responses.create(model=MODEL, input=replay, store=False)
    assert again.output_text == "amber"


class Pet(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=12)
    age: int = pydantic.Field(ge=0, le=99)
    kind: str = pydantic.Field(max_length=12)


def test_json_schema_output_always_validates(client):
    """json_schema output parses and validates for 20 varied prompts."""
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
              "properties": {"name": {"type": "string", "maxLength": 12},
                             "age": {"type": "integer", "minimum": 0, "maximum": 99}}}
    prompts = ["Reply with: hello", "Answer in JSON with key name and value Rex",
               "Call get_weather with city=Paris", "Think, then reply with: x", "hi"]
    for i in range(20):
        resp = client.responses.create(
            model=MODEL, input=f"{prompts[i % 5]} {i}", max_output_tokens=64,
            text={"format": {"type": "json_schema", "name": "person", "schema": schema,
                             "strict": True}})
        obj = json.loads(resp.output_text)
        assert set(obj) == {"name", "age"} and isinstance(obj["name"], str)
        assert isinstance(obj["age"], int) and 0 <= obj["age"] <= 99 and len(obj["name"]) <= 12


def test_responses_parse_with_a_pydantic_model(client):
    """client.responses.parse(text_format=Model) works."""
    resp = client.responses.parse(model=MODEL, input="Answer in JSON with key name and value Rex",
                                  text_format=Pet, max_output_tokens=96)
    assert isinstance(resp.output_parsed, Pet)


def test_json_object_and_invalid_schema(client, server):
    """json_object output parses to an object; an invalid schema is a 400 at create time."""
    resp = client.responses.create(model=MODEL, input="Answer in JSON with key a and value b",
                                   text={"format": {"type": "json_object"}}, max_output_tokens=64)
    assert json.loads(resp.output_text) == {"a": "b"}
    r = server.http.post("/v1/responses", json={"model": MODEL, "input": "x", "text": {
        "format": {"type": "json_schema", "name": "s", "schema": {"type": "object",
                                                                   "properties": 5}}}})
    assert r.status_code == 400 and error_of(r)["param"].startswith("text.format")


def test_logprobs_are_consistent_with_the_text(client):
    """output_text logprobs: one entry per token, tokens spelling the text, top-k sorted."""
    resp = client.responses.create(model=MODEL, input="Reply with: silver 411 lake",
                                   include=["message.output_text.logprobs"], top_logprobs=3)
    part = resp.output[0].content[0]
    assert "".join(lp.token for lp in part.logprobs) == part.text == "silver 411 lake"
    for lp in part.logprobs:
        assert lp.logprob <= 0 and len(lp.top_logprobs) == 3
        values = [t.logprob for t in lp.top_logprobs]
        assert values == sorted(values, reverse=True) and lp.top_logprobs[0].token == lp.token


def test_sampling_extras(client, server):
    """seed makes sampling repeatable; stop ends the text; bad values are 400 with param."""
    body = dict(model=MODEL, input="Reply with: a b c d e f", temperature=1.8, max_output_tokens=24,
                extra_body={"seed": 7, "top_k": 40, "min_p": 0.01, "repetition_penalty": 1.1})
    assert client.responses.create(**body).output_text == client.responses.create(**body).output_text
    stopped = client.responses.create(model=MODEL, input="Reply with: one two three",
                                      extra_body={"stop": [" three"]})
    assert stopped.output_text == "one two" and stopped.status == "completed"
    for field, value in (("top_k", -1), ("min_p", 2), ("repetition_penalty", 0),
                         ("seed", "x"), ("stop", [""])):
        r = server.http.post("/v1/responses", json={"model": MODEL, "input": "x", field: value})
        assert r.status_code == 400 and error_of(r)["param"].startswith(field), (field, r.text)


def test_top_k_past_the_vocabulary_keeps_every_token(client, server):
    """top_k's bound is the request's (100,000), not the model's vocabulary (1,035 here): a
    top_k at or past it filters nothing, seeded or not, and the engine lives on."""
    before = server.http.get("/health").json()["engine_restarts"]
    for extra in ({"top_k": 100_000}, {"top_k": 1_035, "seed": 3}, {"top_k": 100_000, "seed": 3}):
        resp = client.responses.create(model=MODEL, input="Reply with: a b", temperature=1.0,
                                       max_output_tokens=8, extra_body=extra)
        assert resp.status in ("completed", "incomplete"), (extra, resp.error)
    health = server.http.get("/health").json()
    assert health["engine_alive"] and health["engine_restarts"] == before


REPETITIVE = "Reply with: a a a a a a a a"   # greedy, the bundled model repeats "a" on


def test_presence_and_frequency_penalties_are_echoed_and_honoured(client, server):
    """The penalties come back with their effective values (0.0 when not set); a large
    frequency penalty breaks a greedy run of one repeated token; -2..2 as OpenAI's, outside
    it a 400 naming the field."""
    body = dict(model=MODEL, input=REPETITIVE, temperature=0, max_output_tokens=32)
    plain = client.responses.create(**body)
    assert (plain.presence_penalty, plain.frequency_penalty) == (0.0, 0.0)
    assert plain.output_text.split().count("a") >= 12
    penalized = client.responses.create(**body, extra_body={"frequency_penalty": 2.0})
    assert (penalized.presence_penalty, penalized.frequency_penalty) == (0.0, 2.0)
    assert penalized.output_text != plain.output_text
    assert penalized.output_text.split().count("a") < 8
    both = client.responses.create(**body, extra_body={"presence_penalty": -2,
                                                        "frequency_penalty": 1.5})
    assert (both.presence_penalty, both.frequency_penalty) == (-2.0, 1.5)
    stored = server.http.get(f"/v1/responses/{both.id}").json()
    assert (stored["presence_penalty"], stored["frequency_penalty"]) == (-2.0, 1.5)
    for field, value in (("presence_penalty", 2.01), ("presence_penalty", -3),
                         ("frequency_penalty", -2.5), ("frequency_penalty", "x")):
        r = server.http.post("/v1/responses", json={"model": MODEL, "input": "x", field: value})
        assert r.status_code == 400 and error_of(r)["param"] == field, (field, r.text)


def test_penalties_compose_with_constrained_decoding(client):
    """Penalties run before the grammar: a penalized json_schema answer still validates."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
              "additionalProperties": False}
    resp = client.responses.create(
        model=MODEL, input="Answer in JSON with key a and value b", temperature=0,
        max_output_tokens=64, extra_body={"frequency_penalty": 2.0, "presence_penalty": 2.0},
        text={"format": {"type": "json_schema", "name": "s", "schema": schema, "strict": True}})
    assert set(json.loads(resp.output_text)) == {"a"}


def test_background_is_false_on_a_foreground_response_and_its_stream(client, server):
    """`background` is always present: false on a foreground create, on every lifecycle
    event of its stream and on the stored object; true on a background job."""
    resp = server.http.post("/v1/responses", json={"model": MODEL, "input": "Reply with: a"})
    assert resp.json()["background"] is False
    events = sse_events(server.http.post("/v1/responses", json={
        "model": MODEL, "input": "Reply with: a", "stream": True}).text)
    lifecycle = [e["response"] for e in events if "response" in e]
    assert [e["type"] for e in events if "response" in e] == [
        "response.created", "response.in_progress", "response.completed"]
    assert all(r["background"] is False for r in lifecycle)
    stored = server.http.get(f"/v1/responses/{lifecycle[-1]['id']}").json()
    assert stored["background"] is False
    job = server.http.post("/v1/responses", json={"model": MODEL, "input": "Reply with: a",
                                                  "background": True}).json()
    assert job["background"] is True
    done = wait_until(lambda: (r := client.responses.retrieve(job["id"])).status == "completed"
                      and r)
    assert done.background is True


def test_reasoning_echo_restores_a_turn_resent_without_its_reasoning(client):
    """A turn sent back without its reasoning item is rendered with the reasoning triode
    generated for it, as it was generated."""
    from transformers import AutoTokenizer

    from triode.model.loading import BUNDLED_PATH

    tok = AutoTokenizer.from_pretrained(str(BUNDLED_PATH))
    first = client.responses.create(model=MODEL, input="Think, then reply with: cedar 5")
    reasoning, message = first.output
    history = [{"role": "user", "content": "Think, then reply with: cedar 5"},
               {"role": "assistant", "content": "cedar 5"},
               {"role": "user", "content": "Repeat your first answer."}]
    again = client.responses.create(model=MODEL, input=history)
    with_reasoning = [dict(history[1], reasoning_content=reasoning.content[0].text)]
    rendered = tok.apply_chat_template([history[0], *with_reasoning, history[2]],
                                       add_generation_prompt=True, tokenize=False)
    assert again.usage.input_tokens == len(tok.encode(rendered, add_special_tokens=False))
    assert again.output_text == "cedar 5"
