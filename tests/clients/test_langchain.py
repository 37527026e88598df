"""LangChain (langchain-openai, pinned in pyproject.toml's test extra) against triode:
`ChatOpenAI(use_responses_api=True, base_url=...)` for invoke, stream and `bind_tools`, with
the tool's result sent back as a ToolMessage.

langchain-openai sends its requests through the openai SDK (`responses.create`, typed stream
events) and builds AIMessage content blocks, tool calls and usage from the Responses output; a
4xx for a field it sends, or a field it reads that triode leaves out, fails the call."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

MODEL = "triode-tiny"


@pytest.fixture(scope="module")
def llm(triode) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, use_responses_api=True, base_url=triode.base_url + "/v1",
                      api_key="sk-triode-test", max_retries=0)


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


def test_invoke(llm):
    """invoke: an AIMessage with the text, the response's id and model, and usage."""
    message = llm.invoke("Reply with: silver 411 lake")
    assert isinstance(message, AIMessage) and message.text == "silver 411 lake"
    assert message.id.startswith("resp_")
    metadata = message.response_metadata
    assert (metadata["status"], metadata["model_name"]) == ("completed", MODEL)
    usage = message.usage_metadata
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_stream(llm):
    """stream: AIMessageChunks whose text deltas join to the answer; the sum carries usage."""
    chunks = list(llm.stream("Reply with: green fox"))
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    texts = [c.text for c in chunks if c.text]
    assert len(texts) > 1 and "".join(texts) == "green fox"
    total = chunks[0]
    for chunk in chunks[1:]:
        total += chunk
    assert total.text == "green fox"
    assert total.usage_metadata["output_tokens"] > 0


def test_bind_tools_round_trip(llm):
    """bind_tools: the model calls get_weather; the ToolMessage with its result goes back in
    the history and the model answers from it."""
    bound = llm.bind_tools([get_weather])
    history = [HumanMessage("Call get_weather with city=Paris")]
    called = bound.invoke(history)
    call, = called.tool_calls
    assert (call["name"], call["args"]) == ("get_weather", {"city": "Paris"})
    assert call["id"].startswith("call_")
    result = get_weather.invoke(call["args"])
    history += [called, ToolMessage(result, tool_call_id=call["id"])]
    answer = bound.invoke(history)
    assert answer.tool_calls == [] and answer.text == "The result is sunny."
