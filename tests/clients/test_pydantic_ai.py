"""pydantic-ai (pydantic-ai-slim[openai], pinned in pyproject.toml's test extra) against triode:
an Agent on `OpenAIResponsesModel` with an `OpenAIProvider` whose base_url is triode's /v1, for a
run, a streamed run and a tool round trip.

pydantic-ai sends its requests and reads the answers through the openai SDK's Responses types
(`responses.create`, its typed stream events), then maps them onto its own messages; a 4xx
for a field it sends, or a field its mapping needs, fails the run."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

MODEL = "triode-tiny"


@pytest.fixture(scope="module")
def aio():
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture(scope="module")
def model(triode) -> OpenAIResponsesModel:
    provider = OpenAIProvider(base_url=triode.base_url + "/v1", api_key="sk-triode-test")
    return OpenAIResponsesModel(MODEL, provider=provider)


def test_run(model, aio):
    """Agent.run: one response, its text as the output, its usage counted."""
    result = aio.run(Agent(model).run("Reply with: silver 411 lake"))
    assert result.output == "silver 411 lake"
    response = result.all_messages()[-1]
    assert isinstance(response, ModelResponse)
    assert response.model_name == MODEL and response.provider_response_id.startswith("resp_")
    assert response.finish_reason == "stop"
    usage = result.usage
    assert usage.requests == 1 and usage.input_tokens > 0 and usage.output_tokens > 0


def test_run_stream(model, aio):
    """Agent.run_stream: text deltas as they arrive (no debouncing), then the output."""
    async def main():
        async with Agent(model).run_stream("Reply with: green fox") as stream:
            deltas = [d async for d in stream.stream_text(delta=True, debounce_by=None)]
            return deltas, await stream.get_output()

    deltas, output = aio.run(main())
    assert len(deltas) > 1 and "".join(deltas) == "green fox"
    assert output == "green fox"


def test_tool_round_trip(model, aio):
    """A @tool_plain called with city=Paris; its return goes back and the model answers."""
    calls: list[str] = []
    agent = Agent(model)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return "sunny"

    result = aio.run(agent.run("Call get_weather with city=Paris"))
    assert calls == ["Paris"]
    assert result.output == "The result is sunny."
    messages = result.all_messages()
    assert [type(m) for m in messages] == [ModelRequest, ModelResponse, ModelRequest,
                                           ModelResponse]
    call, = messages[1].parts
    assert isinstance(call, ToolCallPart) and call.tool_name == "get_weather"
    assert call.args_as_dict() == {"city": "Paris"}
    returned, = messages[2].parts
    assert isinstance(returned, ToolReturnPart) and returned.content == "sunny"
    assert returned.tool_call_id == call.tool_call_id
