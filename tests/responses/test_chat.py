"""Chat Completions as a translation (responses/chat.py): every field the installed `openai`
SDK's `CompletionCreateParams` and message types define is decided (a row in
docs/compatibility.md's Chat Completions section, and taken, or a 400 naming it); messages
become the items `/v1/responses` takes; answers and chunks are read back from a response."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from openai.types.chat import (chat_completion_assistant_message_param as assistant,
                               chat_completion_developer_message_param as developer,
                               chat_completion_function_message_param as function,
                               chat_completion_system_message_param as system,
                               chat_completion_tool_message_param as tool,
                               chat_completion_user_message_param as user,
                               completion_create_params)

from triode.errors import InvalidRequest
from triode.responses import wire
from triode.responses.builder import ResponseBuilder
from triode.responses.chat import ChunkWriter, completion, to_create
from triode.responses.objects import plain, usage
from triode.responses.lifecycle import Status
from triode.responses.translate import plan
from triode.model.request import Sampling

from .sdk_params import hints
from .test_sdk_fields import sample

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
MESSAGES = {"system": system.ChatCompletionSystemMessageParam,
            "developer": developer.ChatCompletionDeveloperMessageParam,
            "user": user.ChatCompletionUserMessageParam,
            "assistant": assistant.ChatCompletionAssistantMessageParam,
            "tool": tool.ChatCompletionToolMessageParam,
            "function": function.ChatCompletionFunctionMessageParam}
FIELDS = sorted({*hints(completion_create_params.CompletionCreateParamsNonStreaming),
                 *hints(completion_create_params.CompletionCreateParamsStreaming)})
# Fields refused on purpose (docs/compatibility.md says why), with a value the SDK allows.
REFUSED = {"n": 2, "logit_bias": {"1": 5}, "audio": {"voice": "alloy", "format": "mp3"},
           "modalities": ["audio"], "function_call": None}
BASE = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def chat_rows() -> set[str]:
    section = DOC.read_text().split("## `POST /v1/chat/completions`", 1)[1].split("\n## ")[0]
    return {m.group(1) for line in section.splitlines()
            if (m := re.match(r"\| `([^`]+)` \|", line))}


def keys() -> set[str]:
    return {f"chat.{f}" for f in FIELDS} | {
        f"chat.messages.{role}.{f}" for role, td in MESSAGES.items() for f in hints(td)}


def test_every_chat_field_of_the_sdk_has_a_row_and_no_row_is_stale():
    assert sorted(keys() - chat_rows()) == []
    assert sorted(chat_rows() - keys()) == []


@pytest.mark.parametrize("field", [f for f in FIELDS if f not in ("model", "messages")])
def test_each_field_is_taken_or_a_400_naming_it(field):
    value = REFUSED.get(field, sample(hints(
        completion_create_params.CompletionCreateParamsNonStreaming).get(field) or hints(
        completion_create_params.CompletionCreateParamsStreaming)[field]))
    if field == "function_call":
        value = "auto"
    body = {**BASE, field: value}
    if field == "top_logprobs":
        body["logprobs"] = True
    if field in REFUSED and field != "function_call":
        with pytest.raises(InvalidRequest) as exc:
            to_create(body)
        assert exc.value.param == field
    else:
        to_create(body)


def test_messages_become_the_items_responses_takes():
    translated = to_create({"model": "m", "messages": [
        {"role": "system", "content": "s"},
        {"role": "developer", "content": [{"type": "text", "text": "d"}], "name": "x"},
        {"role": "user", "content": [{"type": "text", "text": "u"},
                                     {"type": "image_url", "image_url": {"url": "data:,"}}]},
        {"role": "assistant", "content": None, "reasoning_content": "r", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
        {"role": "assistant", "content": "a", "refusal": "no"}],
        "max_tokens": 5, "response_format": {"type": "json_object"}, "stop": "x",
        "reasoning_effort": "low", "logprobs": True, "top_logprobs": 1, "seed": 3})
    create = translated.create
    kinds = [type(i).__name__ for i in create.input]
    assert kinds == ["Message", "Message", "Message", "ReasoningItem", "FunctionCall",
                     "FunctionCallOutput", "Message"]
    assert translated.origins == ["messages[0]", "messages[1]", "messages[2]", "messages[3]",
                                  "messages[3].tool_calls[0]", "messages[4]", "messages[5]"]
    assert isinstance(create.input[2].content[1], wire.InputImage)
    assert [type(p).__name__ for p in create.input[6].content] == ["OutputText", "Refusal"]
    assert (create.store, create.max_output_tokens, create.text.format.type, create.stop,
            create.reasoning.effort, create.top_logprobs, create.seed) == \
        (False, 5, "json_object", "x", "low", 1, 3)
    assert create.include == ["message.output_text.logprobs"]


@pytest.mark.parametrize("message,param", [
    ({"role": "assistant", "content": "x", "function_call": {"name": "f", "arguments": ""}},
     "messages[0].function_call"),
    ({"role": "assistant", "content": "x", "audio": {"id": "a"}}, "messages[0].audio"),
    ({"role": "function", "name": "f", "content": "x"}, "messages[0]"),
    ({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
     "messages[0].content[0]"),
    ({"role": "assistant", "tool_calls": [{"id": "c", "function": "f"}]},
     "messages[0].tool_calls[0].function"),
    ({"role": "user", "content": 5}, "messages[0].content"),
])
def test_bad_messages_are_400s_naming_the_field(message, param):
    with pytest.raises(InvalidRequest) as exc:
        to_create({"model": "m", "messages": [message]})
    assert exc.value.param == param


def test_a_translated_field_is_named_as_the_client_sent_it():
    """A 400 from the Responses side names the chat field."""
    with pytest.raises(InvalidRequest) as exc:
        to_create({**BASE, "messages": [{"role": "user", "content": [
            {"type": "text", "text": 5}]}]})
    assert exc.value.param == "messages[0].content[0].text"
    translated = to_create({**BASE, "max_tokens": 1})
    named = translated.named(InvalidRequest("bad 'max_output_tokens'",
                                            param="max_output_tokens"))
    assert (named.param, named.message) == ("max_tokens", "bad 'max_tokens'")


def built(text: str = "", call: bool = False, status: Status = Status.COMPLETED):
    create = to_create({**BASE, "stream": True}).create
    builder = ResponseBuilder("resp_abc", plan(create, Sampling()).echo)
    builder.created()
    builder.enter(Status.IN_PROGRESS)
    builder.reasoning("think")
    builder.reasoning_done("think")
    builder.text(text)
    if call:
        builder.call_start(0, kind="function", name="f", namespace=None)
        builder.call_delta(0, '{"a"')
        builder.call_done(0, '{"a": 1}')
    builder.enter(status, usage(7, 3, 2, 1))
    return builder


def test_a_finished_response_is_a_chat_completion():
    obj = completion(built("hi", call=True).obj)
    assert obj["id"] == "chatcmpl-abc" and obj["object"] == "chat.completion"
    choice = obj["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["logprobs"] is None
    message = choice["message"]
    assert (message["content"], message["reasoning_content"]) == ("hi", "think")
    assert message["tool_calls"] == [{"id": message["tool_calls"][0]["id"], "type": "function",
                                      "function": {"name": "f", "arguments": '{"a": 1}'}}]
    assert obj["usage"]["prompt_tokens_details"]["cached_tokens"] == 2
    assert obj["usage"]["completion_tokens_details"]["reasoning_tokens"] == 1
    cut = completion(built("h", status=Status.INCOMPLETE).obj)
    assert cut["choices"][0]["finish_reason"] == "length"


def test_the_events_become_chunks_in_order():
    writer = ChunkWriter(include_usage=True, logprobs=False)
    chunks = [c for e in built("hi", call=True).events for c in writer.feed(e)]
    deltas = [c["choices"][0]["delta"] if c["choices"] else "usage" for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": "", "refusal": None}
    assert deltas[1:] == [{"reasoning_content": "think"}, {"content": "hi"},
                          {"tool_calls": [{"index": 0, "id": deltas[3]["tool_calls"][0]["id"],
                                           "type": "function",
                                           "function": {"name": "f", "arguments": ""}}]},
                          {"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]},
                          {"tool_calls": [{"index": 0, "function": {"arguments": ': 1}'}}]},
                          {}, "usage"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["total_tokens"] == 10
    assert plain(chunks) == chunks   # JSON-shaped


def test_a_custom_tool_call_streams_its_input():
    """A custom tool's call streams as a `custom` tool call: its name first, then its input."""
    create = to_create({**BASE, "stream": True}).create
    builder = ResponseBuilder("resp_c", plan(create, Sampling()).echo)
    builder.created()
    builder.enter(Status.IN_PROGRESS)
    builder.call_start(0, kind="custom", name="patch", namespace=None)
    builder.call_done(0, "diff")
    builder.enter(Status.COMPLETED, usage(1, 1))
    writer = ChunkWriter(include_usage=False, logprobs=False)
    calls = [d for c in (c for e in builder.events for c in writer.feed(e))
             for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert calls[0]["type"] == "custom" and calls[0]["custom"] == {"name": "patch", "input": ""}
    assert calls[1] == {"index": 0, "custom": {"input": "diff"}}
