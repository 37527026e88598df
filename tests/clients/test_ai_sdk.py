"""The Vercel AI SDK (npm `ai` + `@ai-sdk/openai`, pinned in package-lock.json) against triode,
through its Responses model (`createOpenAI({baseURL}).responses('triode-tiny')`): ts/ai_sdk.mjs
runs generateText, streamText, a tool round trip and generateObject, each on its own, and prints
what came back (or the error the SDK threw) with every request it sent.

The SDK validates each response body and stream chunk with its own zod schemas
(`openaiResponsesResponseSchema`, `openaiResponsesChunkSchema` in @ai-sdk/openai): a field it
requires that triode leaves out fails the call, and so does a 4xx for a field it sends."""

from __future__ import annotations

import pytest

from .test_openai_node import run_script


@pytest.fixture(scope="module")
def ai_sdk(node_clients, triode) -> dict:
    return run_script(node_clients, triode, "ai_sdk.mjs")


def result_of(ai_sdk: dict, name: str) -> dict:
    scenario = ai_sdk[name]
    assert scenario["ok"], (f"{name}: the AI SDK threw {scenario['error']}\n"
                            f"requests: {scenario['requests']}")
    return scenario["result"]


def test_generate_text(ai_sdk):
    """generateText: one POST /v1/responses, its text, finish reason and usage."""
    result = result_of(ai_sdk, "generate_text")
    assert result["text"] == "silver 411 lake" and result["finishReason"] == "stop"
    assert result["responseId"].startswith("resp_") and result["warnings"] == []
    usage = result["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    request, = ai_sdk["generate_text"]["requests"]
    assert (request["method"], request["path"], request["status"]) == \
        ("POST", "/v1/responses", 200)
    assert request["body"]["input"] == [
        {"role": "user", "content": [{"type": "input_text",
                                      "text": "Reply with: silver 411 lake"}]}]


def test_stream_text(ai_sdk):
    """streamText: stream: true, text deltas that join to the answer, then the finish."""
    result = result_of(ai_sdk, "stream_text")
    assert result["errors"] == []
    assert len(result["deltas"]) > 1 and "".join(result["deltas"]) == "green fox"
    assert result["text"] == "green fox" and result["finishReason"] == "stop"
    assert result["usage"]["outputTokens"] > 0
    request, = ai_sdk["stream_text"]["requests"]
    assert request["body"]["stream"] is True and request["status"] == 200


def test_tool_round_trip(ai_sdk):
    """A zod-typed tool: the model calls it, the SDK runs it and sends function_call +
    function_call_output back, and the model answers from the result."""
    result = result_of(ai_sdk, "tool_round_trip")
    assert result["calls"] == ["Paris"]
    first, second = result["steps"]
    assert first["finishReason"] == "tool-calls"
    assert first["toolCalls"] == [{"toolName": "get_weather", "input": {"city": "Paris"}}]
    assert first["toolResults"] == [{"toolName": "get_weather", "output": "sunny"}]
    assert second["finishReason"] == "stop" and second["toolCalls"] == []
    assert result["text"] == "The result is sunny."
    call_request, answer_request = ai_sdk["tool_round_trip"]["requests"]
    assert [t["name"] for t in call_request["body"]["tools"]] == ["get_weather"]
    assert [item.get("type") for item in answer_request["body"]["input"][1:]] == \
        ["function_call", "function_call_output"]


def test_generate_object(ai_sdk):
    """generateObject: a strict json_schema text format; the SDK parses and validates the JSON."""
    result = result_of(ai_sdk, "generate_object")
    assert result == {"object": {"city": "Paris"}, "finishReason": "stop"}
    request, = ai_sdk["generate_object"]["requests"]
    fmt = request["body"]["text"]["format"]
    assert (fmt["type"], fmt["strict"]) == ("json_schema", True)
