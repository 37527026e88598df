"""`POST /v1/chat/completions` through a real server on the bundled model, driven by real
clients: the `openai` SDK's `chat.completions` (create, stream, tools, `parse`), LangChain's
`ChatOpenAI` without `use_responses_api`, and the Agents SDK's
`OpenAIChatCompletionsModel`. The bundled model answers "Reply with: X" with X and "Call
get_weather with city=Paris" with that call."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

MODEL = "triode-tiny"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_create_answers_with_a_chat_completion(client):
    """The answer's text, finish reason, usage and ids, as the SDK types them."""
    r = client.chat.completions.create(model=MODEL, messages=ask("Reply with: silver 411 lake"))
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.model == MODEL and len(r.choices) == 1
    choice = r.choices[0]
    assert (choice.message.role, choice.message.content, choice.finish_reason) == \
        ("assistant", "silver 411 lake", "stop")
    assert choice.message.tool_calls is None and choice.logprobs is None
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.completion_tokens > 0


def test_system_and_developer_messages_and_max_tokens(client):
    """A system and a developer message render; max_tokens cuts the answer (length)."""
    r = client.chat.completions.create(model=MODEL, max_tokens=2, messages=[
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": [{"type": "text", "text": "Answer exactly."}]},
        *ask("Reply with: silver 411 lake")])
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 2


def test_stream_with_usage_ends_with_done(server):
    """A stream: the role first, text deltas, the finish reason, the usage chunk
    (stream_options.include_usage), then `data: [DONE]`."""
    raw = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": ask("Reply with: green fox"), "stream": True,
        "stream_options": {"include_usage": True}}).text
    frames = [line[len("data: "):] for line in raw.split("\n\n") if line.startswith("data: ")]
    assert frames[-1] == "[DONE]" and "event:" not in raw
    chunks = [json.loads(f) for f in frames[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                   if c["choices"])
    assert text == "green fox"
    finish, usage = chunks[-2], chunks[-1]
    assert finish["choices"][0]["finish_reason"] == "stop" and finish["usage"] is None
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0


def test_the_sdk_streams_text_and_tool_calls(client):
    """The SDK's stream: text deltas join to the answer; a tool call streams its id and
    name first, then its arguments."""
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=MODEL, messages=ask("Reply with: green fox"), stream=True) if c.choices)
    assert text == "green fox"
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=ask("Call get_weather with city=Paris"), tools=[WEATHER],
        stream=True))
    calls = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].id.startswith("call_") and calls[0].function.name == "get_weather"
    assert json.loads("".join(d.function.arguments or "" for d in calls)) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_round_trip_reuses_the_prompt_cache(client):
    """A tool call, its result in a `tool` message, and the answer from it; the second
    request's prompt starts with the first's, so the prompt cache serves it."""
    messages = ask("Call get_weather with city=Paris")
    first = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    (call,) = message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == \
        ("get_weather", {"city": "Paris"})
    second = client.chat.completions.create(model=MODEL, tools=[WEATHER], messages=[
        *messages, message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
    assert second.choices[0].message.content == "The result is sunny."
    assert second.usage.prompt_tokens_details.cached_tokens > 0


def test_forced_and_refused_tool_choices(client):
    """tool_choice required and named force the call; none forbids it."""
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        r = client.chat.completions.create(model=MODEL, messages=ask("Hello"), tools=[WEATHER],
                                           tool_choice=choice, max_tokens=60)
        assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
    r = client.chat.completions.create(model=MODEL, tools=[WEATHER], tool_choice="none",
                                       messages=ask("Reply with: no tools"))
    assert r.choices[0].message.tool_calls is None


class Answer(BaseModel):
    answer: Literal["yes", "no"]
    n: int = Field(ge=0, le=9)


def test_parse_with_a_pydantic_model(client):
    """`parse`: response_format from a pydantic model (json_schema, strict) holds."""
    r = client.chat.completions.parse(model=MODEL, messages=ask("Answer."),
                                      response_format=Answer, max_tokens=60)
    assert isinstance(r.choices[0].message.parsed, Answer)
    r = client.chat.completions.create(model=MODEL, messages=ask("Answer in JSON."),
                                       response_format={"type": "json_object"}, max_tokens=200)
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length")
    if choice.finish_reason == "stop":   # a finished json_object answer is a JSON object
        assert isinstance(json.loads(choice.message.content), dict)


def test_logprobs(client):
    """logprobs with top_logprobs: one entry per token, each with its alternatives."""
    r = client.chat.completions.create(model=MODEL, messages=ask("Reply with: ok"),
                                       logprobs=True, top_logprobs=2)
    entries = r.choices[0].logprobs.content
    assert "".join(e.token for e in entries) == r.choices[0].message.content
    assert all(len(e.top_logprobs) == 2 for e in entries)


@pytest.mark.parametrize("body,param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}]},
     "messages[1].tool_call_id"),
    ({"messages": [{"role": "user", "content": "x"},
                   {"role": "tool", "tool_call_id": "nope", "content": "r"}]},
     "messages[1].call_id"),
    ({"n": 2}, "n"),
    ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"bogus": 1}, "bogus"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"modalities": ["audio"]}, "modalities"),
])
def test_bad_input_is_a_400_naming_the_chat_field(server, body, param):
    r = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=60,
                   json={"model": MODEL, "messages": ask("x"), **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_a_history_moved_from_responses_hits_the_same_prompt_cache(client):
    """The same conversation sent to /v1/responses and then to /v1/chat/completions renders
    the same prompt: the second is served from the first's cache."""
    text = "Reply with: the amber harbour 42 once more"
    first = client.responses.create(model=MODEL, input=text, prompt_cache_key="moving")
    assert first.output_text
    again = client.chat.completions.create(model=MODEL, messages=ask(text),
                                           prompt_cache_key="moving")
    assert again.usage.prompt_tokens == first.usage.input_tokens
    assert again.usage.prompt_tokens_details.cached_tokens >= first.usage.input_tokens - 1


def test_langchain_chat_openai_without_the_responses_api(server):
    """ChatOpenAI (Chat Completions, its default): invoke, stream and a tool call."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    llm = ChatOpenAI(model=MODEL, base_url=server.base_url + "/v1", api_key="sk-test",
                     max_retries=0)
    message = llm.invoke("Reply with: silver 411 lake")
    assert message.text == "silver 411 lake"
    assert message.response_metadata["id"].startswith("chatcmpl-")
    assert message.response_metadata["finish_reason"] == "stop"
    assert message.usage_metadata["output_tokens"] > 0
    assert "".join(c.text for c in llm.stream("Reply with: green fox")) == "green fox"
    called = llm.bind_tools([get_weather]).invoke("Call get_weather with city=Paris")
    assert [(c["name"], c["args"]) for c in called.tool_calls] == \
        [("get_weather", {"city": "Paris"})]


def test_the_agents_sdk_chat_completions_model(server):
    """The Agents SDK's OpenAIChatCompletionsModel runs a function tool round trip."""
    from agents import (Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool,
                        set_tracing_disabled)

    set_tracing_disabled(True)
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return "sunny"

    async def main():
        client = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="sk-test")
        agent = Agent(name="weather", tools=[get_weather],
                      model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client))
        return await Runner.run(agent, "Call get_weather with city=Paris",
                                run_config=RunConfig(tracing_disabled=True))

    result = asyncio.run(main())
    assert calls == ["Paris"] and result.final_output == "The result is sunny."
