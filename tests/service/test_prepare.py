"""Preparing a turn: truncation, the reasoning echo restored, the compaction transcript and
/compact over a chain."""

from __future__ import annotations

import json

import attrs
import pytest

from triode.responses.objects import plain
from triode.errors import InvalidRequest
from triode.responses import compaction
from triode.responses.convert import structure
from triode.responses.items import chat_messages, turn_keys
from triode.responses.wire import CompactRequest
from triode.service.compactor import Transcript

from .conftest import CALLER, MODEL, FakeModel, conversation, request, start_service, tokens_of


def without_ids(items):
    """Items as compared across two preparations (each gives input items fresh ids)."""
    return [{k: v for k, v in plain(item).items() if k != "id"} for item in items]


def rendered_tokens(items):
    """What the fake model renders a history without instructions or tools to."""
    return len(tokens_of(json.dumps({"messages": chat_messages(None, items), "tools": None})))


async def test_truncation_auto_drops_the_fewest_oldest_turns_that_make_room(nursery):
    """Over the context window, `truncation: auto` keeps the longest tail of the history
    (cut at a split point, the last user message kept) that leaves room for the output."""
    context, room = 200, 50
    service = await start_service(nursery, model=FakeModel(context_length=context))
    items = conversation(turns=10)
    full, full_rendered = await service.preparer().prepare(
        CALLER,
        request(input=items, max_output_tokens=room))
    assert len(full_rendered.tokens) >= context    # truncation disabled: nothing dropped
    plan, rendered = await service.preparer().prepare(
        CALLER,
        request(input=items, max_output_tokens=room, truncation="auto"))
    limit = context - room
    assert len(rendered.tokens) <= limit
    kept = len(plan.history)
    assert 0 < kept < len(full.history)
    assert without_ids(plan.history) == without_ids(full.history[-kept:])  # the oldest went
    assert plan.history[-1].content[0].text == "the last question"
    assert plan.messages == chat_messages(None, plan.history)
    candidates = compaction.truncations(full.history)
    i = [without_ids(c) for c in candidates].index(without_ids(plan.history))
    assert rendered_tokens(candidates[i - 1]) > limit      # dropping less would not fit


async def test_the_echo_restores_reasoning_without_changing_what_it_was_given(nursery):
    """An assistant turn sent back without its reasoning gets the reasoning the echo
    remembered, in the plan's messages and in the rendered prompt."""
    service = await start_service(nursery)
    items = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
             {"role": "user", "content": "again"}]
    bare, _ = await service.preparer().prepare(CALLER, request(input=items))
    key = turn_keys(bare.messages)[1]
    await service.echo.remember([(key, "they greeted me")])
    plan, rendered = await service.preparer().prepare(CALLER, request(input=items))
    assert plan.messages[1] == {"role": "assistant", "content": "hello",
                                "reasoning_content": "they greeted me"}
    assert "they greeted me" in rendered.text
    assert "reasoning_content" not in bare.messages[1]


async def test_the_compaction_transcript_is_the_one_a_create_plans(nursery):
    """A compaction's history, tools and template arguments, built from the request's
    fields, are those `translate.plan` gives the same create (tools filtered by the tool
    choice, compaction items replayed)."""
    service = await start_service(nursery)
    preparer = service.preparer()
    tools = [{"type": "function", "name": "a", "parameters": {"type": "object"}},
             {"type": "function", "name": "b"}]
    req = request(input=conversation(turns=2), instructions="be brief", tools=tools,
                  tool_choice={"type": "allowed_tools", "mode": "auto",
                               "tools": [{"type": "function", "name": "a"}]},
                  chat_template_kwargs={"enable_thinking": False})
    plan, rendered = await preparer.prepare(CALLER, req, submits=False)
    transcript, counted = await preparer.transcript(CALLER, req)
    planned = Transcript.of(plan)
    assert without_ids(transcript.history) == without_ids(planned.history)
    assert attrs.evolve(transcript, history=[]) == attrs.evolve(planned, history=[])
    assert [t["function"]["name"] for t in transcript.template_tools] == ["a"]
    assert counted == rendered


async def test_compact_refuses_a_tool_choice_as_a_create_does(nursery):
    """/compact validates its tools and tool choice as a create would: the same 400."""
    service = await start_service(nursery)
    body = {"model": MODEL, "input": "hi", "tools": [{"type": "function", "name": "a"}],
            "tool_choice": {"type": "function", "name": "missing"}}
    with pytest.raises(InvalidRequest) as as_create:
        await service.preparer().prepare(CALLER, request(**body))
    with pytest.raises(InvalidRequest) as as_compact:
        await service.turns.compact(CALLER, structure(body, CompactRequest))
    assert (as_compact.value.message, as_compact.value.param) == \
        (as_create.value.message, as_create.value.param)


async def test_compact_summarizes_the_chain_before_its_input(nursery):
    """/compact with previous_response_id compacts the stored chain, then the input: the
    oldest turns become one compaction item after the kept ones."""
    service = await start_service(nursery, model=FakeModel(reply="a short summary"))
    first = await service.turns.create(CALLER, request(input=conversation(turns=4)))
    await first.handle.wait()
    compacted = plain(await service.turns.compact(CALLER, structure(
        {"model": MODEL, "input": "and now?", "keep_tokens": 8,
         "previous_response_id": first.handle.response_id}, CompactRequest)))
    output = compacted["output"]
    assert output[-1]["type"] == "compaction"
    assert [i["content"][0]["text"] for i in output[:-1]] == ["and now?"]
    summary, kept = compaction.decode(output[-1]["encrypted_content"], "input")
    assert summary == "a short summary"
    assert compacted["usage"]["input_tokens"] > 0
