"""The request fields the installed openai SDK defines, through a real server (started with
--prompts-dir) and the SDK itself: each newly accepted field answers 200 and is echoed where
the response has a field for it, max_tool_calls caps the calls, stored prompts render, and
fields outside the SDK stay 400s naming them (docs/compatibility.md)."""

from __future__ import annotations

import openai
import pytest

from ..conftest import run_server
from .test_generation import ADD, WEATHER, calls_of
from .test_spine import MODEL, error_of, sse_events

BREAKPOINT = {"mode": "explicit", "ttl": "12h"}
CALLER = {"type": "program", "caller_id": "prog_1"}
NEW_FIELDS = {
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"mode": "explicit", "ttl": "12h", "prewarm": False,
                             "comparison_response_id": "resp_0"},
    "moderation": {"model": "omni-moderation-latest",
                   "policy": {"input": {"mode": "score"}, "output": {"mode": "block"}}},
    "background_options": {"completion_window": "soonest", "continuation_id": "c1"},
    "access_programs": {"cyber": "standard"},
    "image": {"context_compression": "auto"},
    "reasoning": {"mode": "standard", "generate_summary": "auto"},
}
# A history carrying every new field of items and parts: phase, cache breakpoints, the
# calls' caller and async, an output's name and namespace, a null-typed item reference.
HISTORY = [
    {"role": "developer", "content": [{"type": "input_text", "text": "Be terse.",
                                       "prompt_cache_breakpoint": BREAKPOINT}]},
    {"role": "user", "content": "What is the weather in Oslo?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather",
     "arguments": '{"city": "Oslo"}', "async": False, "caller": CALLER},
    {"type": "function_call_output", "call_id": "call_1", "output": "rain",
     "name": "get_weather", "namespace": None, "caller": {"type": "direct"}},
    {"type": "message", "role": "assistant", "phase": "commentary",
     "content": [{"type": "output_text", "text": "Rain.", "annotations": []}]},
    {"type": "message", "role": "assistant", "phase": "final_answer", "content": "Rain."},
    {"role": "user", "content": [{"type": "input_text", "text": "Reply with: amber",
                                  "prompt_cache_breakpoint": {"mode": "explicit"}}]},
]


@pytest.fixture(scope="module")
def prompts_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("prompts")
    (root / "pmpt_reply").mkdir()
    (root / "pmpt_reply" / "1.txt").write_text("Answer in one word.")
    (root / "pmpt_reply" / "2.txt").write_text("Answer {{who}} in {{ count }} word.")
    return root


@pytest.fixture(scope="module")
def prompted(prompts_dir):
    with run_server("--prompts-dir", str(prompts_dir)) as s:
        yield s


def test_a_create_with_every_new_field_answers_and_echoes_them(prompted):
    """The SDK sends every newly accepted field; triode answers 200, the SDK parses the
    response, and the echoes hold the given (or effective) values."""
    client = prompted.client()
    resp = client.responses.create(model=MODEL, input=HISTORY, tools=[WEATHER],
                                   max_tool_calls=3, **NEW_FIELDS)
    assert resp.status == "completed" and resp.output_text == "amber"
    assert resp.prompt_cache_retention == "24h" and resp.max_tool_calls == 3
    assert resp.prompt_cache_options.mode == "explicit"
    assert resp.prompt_cache_options.ttl == "12h"
    assert resp.prompt_cache_options.comparison_response_id == "resp_0"
    assert resp.access_programs.cyber == "standard"
    assert resp.image.context_compression == "disabled"
    assert resp.moderation is None and resp.prompt is None
    phases = [getattr(i, "phase", None) for i in
              client.responses.input_items.list(resp.id, order="asc").data
              if i.type == "message" and i.role == "assistant"]
    assert phases == ["commentary", "final_answer"], "a message's phase is kept"


def test_stream_options_are_accepted_and_no_obfuscation_is_sent(prompted):
    """include_obfuscation (true, OpenAI's default, or false) is accepted; no delta event
    carries an `obfuscation` field (docs/compatibility.md says why)."""
    for include in (True, False):
        r = prompted.http.post("/v1/responses", json={
            "model": MODEL, "input": "Reply with: amber", "stream": True,
            "stream_options": {"include_obfuscation": include}})
        assert r.status_code == 200, r.text
        events = sse_events(r.text)
        assert events[-1]["type"] == "response.completed"
        assert any(e["type"].endswith(".delta") for e in events)
        assert not any("obfuscation" in e for e in events)


def test_max_tool_calls_caps_the_calls_in_the_output_and_the_stream(prompted):
    """A prompt that makes two calls makes one with max_tool_calls 1; the stream announces
    only that one, and the stored response has only it."""
    client = prompted.client()
    prompt = "Call get_weather with city=Rome, then call add_numbers with x=1 and y=2"
    both = client.responses.create(model=MODEL, input=prompt, tools=[WEATHER, ADD])
    assert [c.name for c in calls_of(both)] == ["get_weather", "add_numbers"]
    one = client.responses.create(model=MODEL, input=prompt, tools=[WEATHER, ADD],
                                  max_tool_calls=1)
    assert [c.name for c in calls_of(one)] == ["get_weather"] and one.max_tool_calls == 1
    assert [c.name for c in calls_of(client.responses.retrieve(one.id))] == ["get_weather"]
    r = prompted.http.post("/v1/responses", json={
        "model": MODEL, "input": prompt, "tools": [WEATHER, ADD], "max_tool_calls": 1,
        "stream": True})
    added = [e["item"] for e in sse_events(r.text) if e["type"] == "response.output_item.added"]
    assert [i["name"] for i in added if i["type"] == "function_call"] == ["get_weather"]
    none = client.responses.create(model=MODEL, input=prompt, tools=[WEATHER, ADD],
                                   max_tool_calls=0)
    assert calls_of(none) == []


def test_a_stored_prompt_renders_with_its_variables(prompted):
    """`prompt` names a template of --prompts-dir: rendered with its variables, it is the
    instructions (before the request's own), counted as such, and echoed."""
    client = prompted.client()
    variables = {"who": "me", "count": {"type": "input_text", "text": "one"}}
    resp = client.responses.create(model=MODEL, input="Reply with: amber",
                                   prompt={"id": "pmpt_reply", "variables": variables},
                                   instructions="Be terse.")
    assert resp.status == "completed"
    assert resp.instructions == "Answer me in one word.\n\nBe terse."   # version 2: latest
    assert resp.prompt.id == "pmpt_reply" and resp.prompt.version is None
    assert resp.prompt.variables["who"] == "me"
    first = client.responses.create(model=MODEL, input="Reply with: amber",
                                    prompt={"id": "pmpt_reply", "version": "1"})
    assert first.instructions == "Answer in one word."
    by_prompt = client.responses.input_tokens.count(   # a create field, so extra here
        model=MODEL, input="Reply with: amber",
        extra_body={"prompt": {"id": "pmpt_reply", "version": "1"}})
    by_hand = client.responses.input_tokens.count(
        model=MODEL, input="Reply with: amber", instructions="Answer in one word.")
    assert by_prompt.input_tokens == by_hand.input_tokens
    # Not inherited: the next turn of the chain has no instructions of its own.
    follow = client.responses.create(model=MODEL, input="Reply with: cedar",
                                     previous_response_id=first.id)
    assert follow.instructions is None and follow.prompt is None


@pytest.mark.parametrize("prompt,status,param", [
    ({"id": "pmpt_nope"}, 404, "prompt.id"),
    ({"id": "pmpt_reply", "version": "7"}, 404, "prompt.version"),
    ({"id": "pmpt_reply", "version": "2", "variables": {"who": "me"}}, 400,
     "prompt.variables.count"),
])
def test_an_unknown_prompt_or_a_missing_variable_names_it(prompted, prompt, status, param):
    with pytest.raises(openai.APIStatusError) as exc:
        prompted.client().responses.create(model=MODEL, input="x", prompt=prompt)
    assert exc.value.status_code == status
    assert exc.value.body["param"] == param
    if status == 404:
        assert exc.value.body["code"] == "not_found"


@pytest.mark.parametrize("path,body,param", [
    ("/v1/responses", {"bogus_field": 1}, "bogus_field"),
    ("/v1/responses", {"personality": "friendly"}, "personality"),
    ("/v1/responses", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "x",
         "prompt_cache_breakpoint": {"mode": "explicit", "bogus": 1}}]}]},
     "input[0].content[0].prompt_cache_breakpoint.bogus"),
    ("/v1/responses", {"stream_options": {"include_usage": True}},
     "stream_options.include_usage"),
    ("/v1/responses/compact", {"prompt_cache_options": {"prewarm": True}},
     "prompt_cache_options.prewarm"),
    ("/v1/responses/input_tokens", {"input": [{"role": "user", "content": "x",
                                               "phase": "final_answer", "bogus": 1}]},
     "input[0].bogus"),
])
def test_a_field_outside_the_sdk_is_a_400_naming_it(prompted, path, body, param):
    r = prompted.http.post(path, json={"model": MODEL, "input": "x", **body})
    assert r.status_code == 400, r.text
    assert error_of(r)["param"] == param and "Unknown parameter" in error_of(r)["message"]


def test_compact_input_tokens_and_conversations_take_their_new_fields(prompted):
    """The other endpoints' new fields: input_tokens' personality, compact's cache fields
    and image, conversation items with phase and cache breakpoints."""
    client = prompted.client()
    count = client.responses.input_tokens.count(model=MODEL, input=HISTORY, tools=[WEATHER],
                                                personality="friendly")
    plain = client.responses.input_tokens.count(model=MODEL, input=HISTORY, tools=[WEATHER])
    assert count.input_tokens == plain.input_tokens > 0
    items = [*HISTORY, {"role": "assistant", "content": "amber"},
             *[{"role": role, "content": f"Reply with: word {i}" if role == "user" else
                f"word {i}"} for i in range(4) for role in ("user", "assistant")],
             {"role": "user", "content": "And now?"}]
    compacted = client.responses.compact(
        model=MODEL, input=items, prompt_cache_retention="in_memory",
        prompt_cache_options={"mode": "implicit", "ttl": "30m"},
        image={"context_compression": "disabled"},
        extra_body={"tools": [WEATHER], "keep_tokens": 30, "max_output_tokens": 16})
    assert compacted.output[-1].type == "compaction"
    conv = client.conversations.create(items=HISTORY[:2], metadata={"k": "v"})
    added = client.conversations.items.create(conv.id, items=HISTORY[4:])
    assert len(added.data) == 3


def test_retrieve_takes_its_query_fields(prompted):
    """include and include_obfuscation on a retrieve are accepted (and change nothing)."""
    client = prompted.client()
    resp = client.responses.create(model=MODEL, input="Reply with: amber")
    again = client.responses.retrieve(resp.id, include=["message.output_text.logprobs"],
                                      include_obfuscation=False)
    assert again.id == resp.id and again.output_text == "amber"
