"""Output assembly's limits on tool calls: parallel_tool_calls false and max_tool_calls."""

from __future__ import annotations

import pytest

from triode.model.parsers.base import ToolCallDelta, ToolCallDone, ToolCallStart
from triode.model.request import Sampling
from triode.responses.builder import ResponseBuilder
from triode.responses.convert import structure
from triode.responses.objects import plain
from triode.responses.output import OutputAssembler
from triode.responses.translate import plan
from triode.responses.wire import CreateResponse


class ScriptedParser:
    """A parser that turns the i-th fed token into the i-th list of events."""

    def __init__(self, events):
        self._events = iter(events)

    def feed(self, text):
        return next(self._events)

    def finish(self):
        return []


def three_calls():
    return [[ToolCallStart(i, "f"), ToolCallDelta(i, "{}"), ToolCallDone(i, "f", "{}")]
            for i in range(3)]


def assembled(**kwargs):
    builder = ResponseBuilder("resp_1", plan(structure({"model": "m"}, CreateResponse),
                                             Sampling()).echo)
    assembler = OutputAssembler(builder, ScriptedParser(three_calls()),
                                resolve=lambda name: ("function", name, None), **kwargs)
    for _ in range(3):
        assembler.feed("t")
    assembler.finish()
    return builder, assembler


@pytest.mark.parametrize("kwargs,calls", [
    ({}, 3),
    ({"max_calls": 2}, 2),
    ({"max_calls": 0}, 0),
    ({"max_calls": 5}, 3),
    ({"parallel": False}, 1),
    ({"parallel": False, "max_calls": 0}, 0),
    ({"allow_calls": False}, 0),
])
def test_calls_past_the_cap_are_dropped_from_the_output_and_the_stream(kwargs, calls):
    """max_tool_calls keeps the first N calls the model writes (parallel_tool_calls false
    caps at one); the dropped ones leave no item and no event."""
    builder, assembler = assembled(**kwargs)
    items = [item for item in plain(builder.obj)["output"] if item["type"] == "function_call"]
    assert len(items) == calls == assembler.call_count
    announced = [e for e in builder.events if e.type == "response.output_item.added"]
    deltas = [e for e in builder.events if e.type == "response.function_call_arguments.delta"]
    assert len(announced) == len(deltas) == calls
