"""The typed answers against the schema of record: the installed `openai` SDK's models."""

from __future__ import annotations

import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from triode.model.request import Sampling
from triode.responses import translate, wire
from triode.responses.builder import ResponseBuilder
from triode.responses.convert import structure
from triode.responses.lifecycle import Status
from triode.responses.objects import (ResponseError, ResponseObject, dumps, event_of, item_of,
                                     plain, response_of, usage)

OPEN_RESPONSES_REQUIRED = (
    "id object created_at completed_at status incomplete_details model previous_response_id "
    "instructions output error tools tool_choice truncation parallel_tool_calls text top_p "
    "presence_penalty frequency_penalty top_logprobs temperature reasoning user usage "
    "max_output_tokens max_tool_calls store background service_tier metadata "
    "safety_identifier prompt_cache_key").split()
EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)


def built(end: str, background: bool = False) -> ResponseBuilder:
    """A response built as a supervisor builds one: reasoning, text, a call, then `end`."""
    req = structure({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}],
                     "include": ["message.output_text.logprobs"]}, wire.CreateResponse)
    builder = ResponseBuilder("resp_1", translate.plan(req, Sampling()).echo,
                              background=background)
    builder.created()
    builder.enter(Status.IN_PROGRESS)
    builder.reasoning("thinking")
    builder.reasoning_done("thinking")
    builder.text("Hello", [{"token": "Hello", "logprob": -0.1, "bytes": [72],
                            "top_logprobs": []}])
    builder.call_start(0, kind="function", name="f", namespace=None)
    builder.call_delta(0, "{}")
    builder.call_done(0, "{}")
    if end == "completed":
        builder.enter(Status.COMPLETED, usage(3, 4, cached_tokens=1, reasoning_tokens=1))
    elif end == "incomplete":
        builder.enter(Status.INCOMPLETE, usage(3, 4))
    elif end == "failed":
        builder.enter(Status.FAILED, usage(3, 4), ResponseError("server_error", "boom"))
    else:
        builder.enter(Status.CANCELLED, usage(3, 4))
    return builder


@pytest.mark.parametrize("end", ["completed", "incomplete", "failed", "cancelled"])
def test_every_response_object_is_one_the_sdk_model_accepts(end):
    """The response's JSON validates as the SDK's `Response`, carries every field that
    model defines and every name Open Responses requires, whatever way it ended."""
    obj = plain(built(end).obj)
    Response.model_validate(obj)
    assert set(Response.model_fields) <= set(obj)
    assert set(OPEN_RESPONSES_REQUIRED) <= set(obj)
    assert obj["completed_at"] is not None


def test_every_stream_event_is_one_the_sdk_defines():
    """Every event the builder emits validates as one of the SDK's stream events (the
    snapshots inside lifecycle events as `Response`s), with its `type` as the SDK names it."""
    for event in built("completed", background=True).events:
        data = plain(event)
        if data["type"].startswith("mlx."):
            continue   # triode's own extension events (docs/architecture.md)
        parsed = EVENTS.validate_python(data)
        assert parsed.type == data["type"]


def test_stored_json_reads_back_as_the_same_objects():
    """What a store keeps (the converter's JSON) reads back into equal objects."""
    builder = built("completed")
    assert response_of(plain(builder.obj)) == builder.obj
    for item in builder.obj.output:
        assert item_of(plain(item)) == item
    assert isinstance(response_of(plain(builder.obj)), ResponseObject)


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("end", ["completed", "incomplete", "failed", "cancelled"])
def test_an_event_read_back_from_its_json_is_the_event(end, background):
    """A stored or mirrored event log is read back typed (`event_of`): every event the
    builder makes comes back equal, and re-encodes to the same JSON (a replay sends what
    was streamed)."""
    events = built(end, background).events
    for event in events:
        back = event_of(plain(event))
        assert back == event and dumps(back) == dumps(event)
