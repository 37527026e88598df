"""The OpenAI Agents SDK (openai-agents, pinned in pyproject.toml's test extra) against triode.

Every test runs the real Runner on asyncio, with the model provider pointed at the test
server and tracing off (the SDK would otherwise export traces to api.openai.com). The tests
share one event loop, as an application does: providers made from a `base_url` share the
SDK's one httpx client, whose connections belong to the loop that opened them."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest
from agents import (Agent, OpenAIConversationsSession, OpenAIResponsesModel, RunConfig, Runner,
                    SQLiteSession, function_tool, set_tracing_disabled)
from agents.memory import OpenAIResponsesCompactionSession
from agents.models.openai_provider import OpenAIProvider
from agents.models.openai_responses import OpenAIResponsesWSModel
from openai import AsyncOpenAI

from ..conftest import run_server

MODEL = "triode-tiny"
API_KEY = "sk-triode-test"

set_tracing_disabled(True)


@pytest.fixture(scope="module")
def aio():
    with asyncio.Runner() as runner:
        yield runner


def run_config(base_url: str, **provider_options: Any) -> RunConfig:
    """The setup docs/clients.md shows: a provider on triode's /v1, Responses API."""
    provider = OpenAIProvider(base_url=base_url + "/v1", api_key=API_KEY, use_responses=True,
                              **provider_options)
    return RunConfig(model_provider=provider, tracing_disabled=True)


def test_runner_run(triode, aio):
    """Runner.run answers a turn with the model's text and a response id."""
    async def main():
        return await Runner.run(Agent(name="echo", model=MODEL), "Reply with: silver 411 lake",
                                run_config=run_config(triode.base_url))

    result = aio.run(main())
    assert result.final_output == "silver 411 lake"
    assert result.last_response_id.startswith("resp_")
    assert result.context_wrapper.usage.output_tokens > 0


def test_runner_run_streamed(triode, aio):
    """Runner.run_streamed streams text deltas whose join is the final output."""
    async def main():
        result = Runner.run_streamed(Agent(name="echo", model=MODEL), "Reply with: green fox",
                                     run_config=run_config(triode.base_url))
        deltas = [event.data.delta async for event in result.stream_events()
                  if event.type == "raw_response_event"
                  and event.data.type == "response.output_text.delta"]
        return result, deltas

    result, deltas = aio.run(main())
    assert result.final_output == "green fox"
    assert len(deltas) > 1 and "".join(deltas) == "green fox"


def test_function_tool_round_trip(triode, aio):
    """A @function_tool called with city=Paris, and the answer from its result."""
    # OpenAIResponsesModel on an explicit AsyncOpenAI; the prompt names the tool and argument.
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return "sunny"

    async def main():
        client = AsyncOpenAI(base_url=triode.base_url + "/v1", api_key=API_KEY)
        agent = Agent(name="weather", tools=[get_weather],
                      model=OpenAIResponsesModel(model=MODEL, openai_client=client))
        return await Runner.run(agent, "Call get_weather with city=Paris",
                                run_config=RunConfig(tracing_disabled=True))

    result = aio.run(main())
    assert calls == ["Paris"]
    assert [item.type for item in result.new_items] == \
        ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert result.final_output == "The result is sunny."


def test_previous_response_id(triode, aio):
    """previous_response_id= and auto_previous_response_id chain runs on stored responses."""
    async def main():
        config = run_config(triode.base_url)
        agent = Agent(name="echo", model=MODEL)
        first = await Runner.run(agent, "Reply with: amber 77 kite", run_config=config)
        second = await Runner.run(agent, "Repeat your first answer.", run_config=config,
                                  previous_response_id=first.last_response_id)
        auto = await Runner.run(agent, "Reply with: plum 9 reed", run_config=config,
                                auto_previous_response_id=True)
        return first, second, auto

    first, second, auto = aio.run(main())
    assert second.final_output == "amber 77 kite"
    assert second.last_response_id != first.last_response_id
    assert auto.final_output == "plum 9 reed" and auto.last_response_id.startswith("resp_")


def test_openai_conversations_session(triode, aio):
    """OpenAIConversationsSession keeps the history in triode's Conversations API."""
    # The second run sees the first; pop_item and clear_session delete an item and the whole
    # conversation.
    async def main():
        config = run_config(triode.base_url)
        agent = Agent(name="echo", model=MODEL)
        client = AsyncOpenAI(base_url=triode.base_url + "/v1", api_key=API_KEY)
        session = OpenAIConversationsSession(openai_client=client)
        await Runner.run(agent, "Reply with: plum 9 reed", run_config=config, session=session)
        second = await Runner.run(agent, "Repeat your first answer.", run_config=config,
                                  session=session)
        conversation_id = session.session_id
        listed = await client.conversations.items.list(conversation_id, order="asc")
        popped = await session.pop_item()
        remaining = await session.get_items()
        await session.clear_session()
        try:
            await client.conversations.retrieve(conversation_id)
            cleared = False
        except openai.NotFoundError:
            cleared = True
        return second, conversation_id, listed, popped, remaining, cleared

    second, conversation_id, listed, popped, remaining, cleared = aio.run(main())
    assert second.final_output == "plum 9 reed"
    assert conversation_id.startswith("conv_")
    texts = [(item.role, item.content[0].text) for item in listed.data]
    assert texts == [("user", "Reply with: plum 9 reed"), ("assistant", "plum 9 reed"),
                     ("user", "Repeat your first answer."), ("assistant", "plum 9 reed")]
    assert popped["role"] == "assistant" and len(remaining) == 3
    assert cleared   # clear_session deleted the conversation


def test_sqlite_session(triode, aio):
    """An in-memory SQLiteSession resends history triode accepts; turn 2 sees turn 1."""
    async def main():
        config = run_config(triode.base_url)
        agent = Agent(name="echo", model=MODEL)
        session = SQLiteSession("triode-test")
        await Runner.run(agent, "Reply with: amber 77 kite", run_config=config, session=session)
        second = await Runner.run(agent, "Repeat your first answer.", run_config=config,
                                  session=session)
        return second, await session.get_items()

    second, items = aio.run(main())
    assert second.final_output == "amber 77 kite"
    assert [item.get("role") for item in items] == ["user", "assistant", "user", "assistant"]


def test_websocket_model(triode, aio):
    """use_responses_websocket=True runs everything over one socket, no POST /responses."""
    # Two runs chained by previous_response_id and a streamed run; an httpx hook sees any HTTP call.
    posts: list[str] = []

    async def record(request: httpx.Request) -> None:
        posts.append(f"{request.method} {request.url.path}")

    async def main():
        http = httpx.AsyncClient(event_hooks={"request": [record]})
        client = AsyncOpenAI(base_url=triode.base_url + "/v1", api_key=API_KEY, http_client=http)
        provider = OpenAIProvider(openai_client=client, use_responses=True,
                                  use_responses_websocket=True)
        config = RunConfig(model_provider=provider, tracing_disabled=True)
        agent = Agent(name="echo", model=MODEL)
        try:
            first = await Runner.run(agent, "Reply with: amber 77 kite", run_config=config)
            second = await Runner.run(agent, "Repeat your first answer.", run_config=config,
                                      previous_response_id=first.last_response_id)
            streamed = Runner.run_streamed(agent, "Reply with: green fox", run_config=config)
            deltas = [event.data.delta async for event in streamed.stream_events()
                      if event.type == "raw_response_event"
                      and event.data.type == "response.output_text.delta"]
            model = provider.get_model(MODEL)
        finally:
            await provider.aclose()
        return first, second, streamed, deltas, model

    first, second, streamed, deltas, model = aio.run(main())
    assert isinstance(model, OpenAIResponsesWSModel)
    assert first.final_output == "amber 77 kite" and second.final_output == "amber 77 kite"
    assert streamed.final_output == "green fox" and "".join(deltas) == "green fox"
    assert posts == []


@pytest.fixture(scope="module")
def gpt_alias_triode():
    """OpenAIResponsesCompactionSession accepts only OpenAI model names (gpt-*, o1...), so
    this server answers to `gpt-4.1`."""
    with run_server("--model-alias", "gpt-4.1") as server:
        yield server


def test_responses_compaction_session(gpt_alias_triode, aio):
    """OpenAIResponsesCompactionSession compacts through /compact after ten turns."""
    # Default trigger: 10 items that are not user messages. /compact gets the last response's
    # id; the history becomes kept items + one compaction item, and the next turns still answer.
    base = gpt_alias_triode.base_url + "/v1"
    words = "amber kite plum reed fox fern oak moss lark dune vale cove reef".split()
    compact_calls: list[str] = []

    async def record(request: httpx.Request) -> None:
        if request.url.path.endswith("/responses/compact"):
            compact_calls.append(request.content.decode())

    async def main():
        http = httpx.AsyncClient(event_hooks={"request": [record]})
        client = AsyncOpenAI(base_url=base, api_key=API_KEY, http_client=http)
        config = RunConfig(model_provider=OpenAIProvider(openai_client=client, use_responses=True),
                           tracing_disabled=True)
        agent = Agent(name="echo", model="gpt-4.1")
        session = OpenAIResponsesCompactionSession("triode-compaction", SQLiteSession("c"),
                                                   client=client, model="gpt-4.1")
        answers, sizes, compactions = [], [], []
        for turn in range(12):
            phrase = f"{words[turn]} {turn + 3} {words[turn + 1]}"
            result = await Runner.run(agent, f"Reply with: {phrase}", run_config=config,
                                      session=session)
            items = await session.get_items()
            answers.append(result.final_output == phrase)
            sizes.append(len(items))
            compactions.append(sum(item.get("type") == "compaction" for item in items))
        return answers, sizes, compactions

    answers, sizes, compactions = aio.run(main())
    assert all(answers), answers
    assert sizes[:9] == [2, 4, 6, 8, 10, 12, 14, 16, 18]
    # After turn 10 the 20 items became the kept ones plus one compaction item.
    assert sizes[9] < 20 and compactions[9] == 1, (sizes, compactions)
    assert compactions[10:] == [1, 1] and sizes[10:] == [sizes[9] + 2, sizes[9] + 4]
    assert len(compact_calls) == 1 and '"previous_response_id"' in compact_calls[0], compact_calls
