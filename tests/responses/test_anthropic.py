"""Anthropic's Messages API as a translation (responses/anthropic.py): every field the
installed `anthropic` SDK's `MessageCreateParams` defines, and every content block type, is
decided (a row in docs/compatibility.md's Anthropic section); blocks become the items
`/v1/responses` takes; answers and stream events are read back from a response."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from anthropic.types import content_block_param, message_create_params

from triode.errors import InvalidRequest
from triode.model.request import Sampling
from triode.responses.anthropic import EventWriter, message, to_create
from triode.responses.builder import ResponseBuilder
from triode.responses.lifecycle import Status
from triode.responses.objects import usage
from triode.responses.translate import plan

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
FIELDS = sorted({*typing.get_type_hints(message_create_params.MessageCreateParamsNonStreaming),
                 *typing.get_type_hints(message_create_params.MessageCreateParamsStreaming)})
BLOCKS = sorted(typing.get_type_hints(td)["type"].__args__[0]
                for td in typing.get_args(content_block_param.ContentBlockParam))
BASE = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def rows() -> set[str]:
    section = DOC.read_text().split("## `POST /v1/messages`", 1)[1].split("\n## ")[0]
    return {m.group(1) for line in section.splitlines()
            if (m := re.match(r"\| `([^`]+)` \|", line))}


def test_every_field_and_block_of_the_sdk_has_a_row_and_no_row_is_stale():
    keys = {f"messages.{f}" for f in FIELDS} | {f"messages.block.{b}" for b in BLOCKS}
    assert sorted(keys - rows()) == []
    assert sorted(rows() - keys) == []


def test_blocks_become_the_items_responses_takes():
    t = to_create({**BASE, "system": [{"type": "text", "text": "s1"},
                                      {"type": "text", "text": "s2"}],
                   "stop_sequences": ["X"], "temperature": 0.5, "top_k": 3,
                   "thinking": {"type": "disabled"}, "metadata": {"user_id": "u"},
                   "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
                   "tools": [{"name": "f", "input_schema": {"type": "object"}},
                             {"type": "web_search_20250305", "name": "web_search"}],
                   "messages": [
                       {"role": "user", "content": [
                           {"type": "text", "text": "look"},
                           {"type": "image", "source": {"type": "base64",
                                                        "media_type": "image/png",
                                                        "data": "AAAA"}}]},
                       {"role": "assistant", "content": [
                           {"type": "thinking", "thinking": "hm", "signature": "s"},
                           {"type": "text", "text": "calling"},
                           {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
                       {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                           {"type": "text", "text": "and?"}]}]})
    c = t.create
    assert c.instructions == "s1\n\ns2" and c.stop == ["X"] and c.top_k == 3
    assert (c.tool_choice, c.parallel_tool_calls, c.user) == ("required", False, "u")
    assert c.chat_template_kwargs == {"enable_thinking": False}
    assert [type(i).__name__ for i in c.input] == [
        "Message", "ReasoningItem", "Message", "FunctionCall", "FunctionCallOutput", "Message"]
    assert c.input[3].arguments == '{"a": 1}' and c.input[4].output == "ok"
    assert c.input[0].content[1].image_url == "data:image/png;base64,AAAA"
    assert [tool["name"] for tool in c.tools] == ["f"]
    assert t.dropped_tools == ("web_search_20250305",) and c.store is False


@pytest.mark.parametrize("body,param", [
    ({"max_tokens": None}, "max_tokens"),
    ({"messages": [{"role": "user", "content": [{"type": "search_result"}]}]},
     "messages.0.content.0.type"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_result"}]}]},
     "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
     "messages.0.content.0.tool_use_id"),
    ({"tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({"thinking": {"type": "sometimes"}}, "thinking.type"),
    ({"system": [{"type": "image"}]}, "system.0"),
    ({"output_config": {"format": {"type": "xml"}}}, "output_config.format"),
])
def test_bad_input_is_a_400_naming_the_field(body, param):
    with pytest.raises(InvalidRequest) as exc:
        to_create({k: v for k, v in {**BASE, **body}.items() if v is not None})
    assert exc.value.param == param


def built(status: Status = Status.COMPLETED):
    create = to_create({**BASE, "stream": True}).create
    builder = ResponseBuilder("resp_abc", plan(create, Sampling()).echo)
    builder.created()
    builder.enter(Status.IN_PROGRESS)
    builder.reasoning("hm")
    builder.reasoning_done("hm")
    builder.text("hi")
    builder.call_start(0, kind="function", name="f", namespace=None)
    builder.call_delta(0, '{"a"')
    builder.call_done(0, '{"a": 1}')
    builder.enter(status, usage(10, 3, 4))
    return builder


def test_a_finished_response_is_a_message():
    m = message(built().obj)
    assert (m["id"], m["stop_reason"], m["stop_sequence"]) == ("msg_abc", "tool_use", None)
    assert [b["type"] for b in m["content"]] == ["thinking", "text", "tool_use"]
    assert m["content"][2]["input"] == {"a": 1}
    assert m["usage"] == {"input_tokens": 6, "output_tokens": 3,
                          "cache_read_input_tokens": 4, "cache_creation_input_tokens": 0}
    assert message(built().obj, "END")["stop_reason"] == "stop_sequence"
    assert message(built(Status.INCOMPLETE).obj)["stop_reason"] == "max_tokens"


def test_the_events_are_anthropics_stream():
    writer = EventWriter()
    names = [name for e in built().events for name, _ in writer.feed(e)]
    assert names == ["message_start", "ping",
                     "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]
