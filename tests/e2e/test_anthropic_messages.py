"""`POST /v1/messages` and `/v1/messages/count_tokens` through a real server on the bundled
model, driven by the real `anthropic` SDK (pinned in the test extra): create, stream, a tool
round trip, count_tokens, stop reasons, and errors in Anthropic's shape."""

from __future__ import annotations

from typing import Iterator

import anthropic
import httpx
import pytest

from ..conftest import Server, run_server

MODEL = "triode-tiny"
KEY = "sk-anthropic-test"
WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}


@pytest.fixture(scope="module")
def keyed() -> Iterator[Server]:
    with run_server("--api-key", KEY) as server:
        yield server


@pytest.fixture(scope="module")
def claude(keyed) -> anthropic.Anthropic:
    """The SDK as Claude Code's users point it: base URL and key (sent as x-api-key)."""
    return anthropic.Anthropic(base_url=keyed.base_url, api_key=KEY, max_retries=0)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_create_answers_with_a_message(claude):
    m = claude.messages.create(model=MODEL, max_tokens=64, messages=ask("Reply with: silver 411 lake"))
    assert (m.type, m.role, m.model, m.id[:4]) == ("message", "assistant", MODEL, "msg_")
    assert [(b.type, b.text) for b in m.content] == [("text", "silver 411 lake")]
    assert (m.stop_reason, m.stop_sequence) == ("end_turn", None)
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
    assert m.usage.cache_read_input_tokens >= 0


def test_system_as_a_string_and_as_blocks(claude):
    for system in ("You are terse.", [{"type": "text", "text": "You are terse."}]):
        m = claude.messages.create(model=MODEL, max_tokens=64, system=system,
                                   messages=ask("Reply with: green fox"))
        assert m.content[0].text == "green fox"


def test_stream_text_and_the_final_message(claude):
    with claude.messages.stream(model=MODEL, max_tokens=64,
                                messages=ask("Reply with: green fox")) as stream:
        deltas = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(deltas) > 1 and "".join(deltas) == "green fox"
    assert final.content[0].text == "green fox" and final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0


def test_the_raw_stream_is_anthropics_event_sequence(keyed):
    raw = httpx.post(f"{keyed.base_url}/v1/messages", timeout=60,
                     headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
                     json={"model": MODEL, "max_tokens": 64, "stream": True,
                           "messages": ask("Reply with: green fox")}).text
    names = [line[len("event: "):] for line in raw.splitlines() if line.startswith("event: ")]
    deltas = names.count("content_block_delta")
    assert names == ["message_start", "ping", "content_block_start",
                     *["content_block_delta"] * deltas, "content_block_stop",
                     "message_delta", "message_stop"]
    assert deltas > 1


def test_tool_round_trip_reuses_the_prompt_cache(claude):
    """tool_use, then tool_result, then the answer; the second request's prompt extends the
    first's, so the cache supplies it (cache_read_input_tokens)."""
    first = claude.messages.create(model=MODEL, max_tokens=64, tools=[WEATHER],
                                   messages=ask("Call get_weather with city=Paris"))
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"})
    second = claude.messages.create(model=MODEL, max_tokens=64, tools=[WEATHER], messages=[
        *ask("Call get_weather with city=Paris"),
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": "sunny"}]}])
    assert second.content[0].text == "The result is sunny."
    assert second.usage.cache_read_input_tokens > 0


def test_a_streamed_tool_use_carries_its_input_as_json_deltas(claude):
    with claude.messages.stream(model=MODEL, max_tokens=64, tools=[WEATHER],
                                messages=ask("Call get_weather with city=Paris")) as stream:
        kinds = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "input_json_delta" in kinds
    assert final.content[-1].input == {"city": "Paris"} and final.stop_reason == "tool_use"


def test_tool_choice_any_and_named_force_the_call(claude):
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
        m = claude.messages.create(model=MODEL, max_tokens=64, tools=[WEATHER],
                                   tool_choice=choice, messages=ask("Hello"))
        assert m.content[-1].type == "tool_use" and m.content[-1].name == "get_weather"


def test_stop_sequences_and_max_tokens(claude):
    stopped = claude.messages.create(model=MODEL, max_tokens=64, stop_sequences=["411"],
                                     messages=ask("Reply with: silver 411 lake"))
    assert (stopped.content[0].text, stopped.stop_reason, stopped.stop_sequence) == \
        ("silver ", "stop_sequence", "411")
    cut = claude.messages.create(model=MODEL, max_tokens=2,
                                 messages=ask("Reply with: silver 411 lake"))
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2


def test_count_tokens_counts_what_create_renders(claude):
    messages = ask("Reply with: amber 12 kite")
    counted = claude.messages.count_tokens(model=MODEL, messages=messages, tools=[WEATHER])
    made = claude.messages.create(model=MODEL, max_tokens=8, messages=messages,
                                  tools=[WEATHER])
    assert counted.input_tokens == made.usage.input_tokens + made.usage.cache_read_input_tokens


def test_thinking_and_metadata_are_accepted(claude):
    for thinking in ({"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"}):
        m = claude.messages.create(model=MODEL, max_tokens=64, thinking=thinking,
                                   metadata={"user_id": "u1"},
                                   messages=ask("Reply with: green fox"))
        assert m.content[-1].text == "green fox"


@pytest.mark.parametrize("body,status,kind,says", [
    ({"messages": ask("x")}, 400, "invalid_request_error", "max_tokens"),
    ({"max_tokens": 8, "messages": []}, 400, "invalid_request_error", "messages"),
    ({"max_tokens": 8, "messages": [{"role": "robot", "content": "x"}]}, 400,
     "invalid_request_error", "messages.0.role"),
    ({"max_tokens": 8, "messages": ask("x"), "tool_choice": {"type": "maybe"}}, 400,
     "invalid_request_error", "tool_choice.type"),
    ({"max_tokens": 8, "messages": ask("x"), "bogus": 1}, 400, "invalid_request_error",
     "bogus"),
    ({"max_tokens": 8, "messages": ask("x"), "model": "other"}, 400, "invalid_request_error",
     "other"),
])
def test_errors_take_anthropics_shape(keyed, body, status, kind, says):
    r = httpx.post(f"{keyed.base_url}/v1/messages", timeout=60, headers={"x-api-key": KEY},
                   json={"model": MODEL, **body})
    assert r.status_code == status, r.text
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == kind
    assert says in error["error"]["message"]


def test_keys_as_x_api_key_or_bearer(keyed):
    body = {"model": MODEL, "max_tokens": 8, "messages": ask("Reply with: ok")}
    for headers in ({"x-api-key": KEY}, {"Authorization": f"Bearer {KEY}"}):
        assert httpx.post(f"{keyed.base_url}/v1/messages", json=body, headers=headers,
                          timeout=60).status_code == 200
    wrong = httpx.post(f"{keyed.base_url}/v1/messages", json=body, timeout=60,
                       headers={"x-api-key": "sk-wrong"})
    assert wrong.status_code == 401
    assert wrong.json()["error"]["type"] == "authentication_error"


def test_server_tools_are_dropped_and_named(keyed):
    r = httpx.post(f"{keyed.base_url}/v1/messages", timeout=60, headers={"x-api-key": KEY},
                   json={"model": MODEL, "max_tokens": 16, "messages": ask("Reply with: ok"),
                         "tools": [{"type": "web_search_20250305", "name": "web_search"}]})
    assert r.status_code == 200 and r.headers["x-triode-dropped-tools"] == \
        "web_search_20250305"
