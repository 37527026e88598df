"""The request's wire types as the converter reads them: a field named by a Python keyword is
read under its JSON name, each input item type names its class, and the endpoints' bodies
differ only where their docstrings say."""

from __future__ import annotations

import typing

import attrs
import pytest

from triode.errors import InvalidRequest
from triode.responses import wire
from triode.responses.convert import structure


def test_a_keyword_field_is_read_and_named_under_its_json_name():
    """`async` (a Python keyword) is the JSON name of `async_`: read from it, and `async_`
    itself is an unknown field."""
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    read = structure({"model": "m", "input": [{**call, "async": True}]}, wire.CreateResponse)
    assert read.input[0].async_ is True
    field = attrs.fields(wire.FunctionCall).async_
    assert wire.json_name(field) == "async"
    assert wire.json_name(attrs.fields(wire.FunctionCall).name) == "name"
    with pytest.raises(InvalidRequest):
        structure({"model": "m", "input": [{**call, "async_": True}]}, wire.CreateResponse)


def test_every_input_item_type_names_its_class():
    """ITEM_TYPES covers exactly the input item union, each class under its own `type`."""
    assert set(wire.ITEM_TYPES.values()) == set(typing.get_args(wire.InputItem))
    for tag, cls in wire.ITEM_TYPES.items():
        assert tag in typing.get_args(typing.get_type_hints(cls)["type"]), (tag, cls)


def test_input_tokens_takes_a_create_s_fields_and_personality_only_it_defines():
    """The count endpoint reads every create field plus `personality`; a create refuses
    `personality` by name."""
    body = {"model": "m", "input": "hi", "temperature": 0.5, "personality": "terse"}
    counted = structure(body, wire.InputTokensRequest)
    assert (counted.temperature, counted.personality) == (0.5, "terse")
    with pytest.raises(InvalidRequest) as refused:
        structure(body, wire.CreateResponse)
    assert refused.value.param == "personality"


def test_compact_may_name_a_chain_alone():
    """/compact's `input` defaults to no items (the previous_response_id chain is the
    history); a create's sampling fields are not /compact's and are refused by name."""
    compact = structure({"model": "m", "previous_response_id": "resp_1"}, wire.CompactRequest)
    assert (compact.input, compact.previous_response_id) == ([], "resp_1")
    with pytest.raises(InvalidRequest) as refused:
        structure({"model": "m", "temperature": 0.5}, wire.CompactRequest)
    assert refused.value.param == "temperature"
