"""The cattrs converter: strict types, unknown fields, and the JSON path of every error."""

import pytest

from triode.errors import InvalidRequest
from triode.responses.convert import structure
from triode.responses.wire import (CreateResponse, InputText, ItemReference, Message, OutputText,
                                   Refusal)


def test_messages_without_type_and_assistant_parts_are_accepted():
    """Items with a role but no type are messages; output_text and refusal parts are accepted."""
    req = structure({"model": "m", "input": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": []},
                                          {"type": "refusal", "refusal": "no"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "b"}]},
    ]}, CreateResponse)
    assert isinstance(req.input[0], Message) and req.input[0].content == "hi"
    assert req.input[1].content == [OutputText(text="a"), Refusal(refusal="no")]
    assert req.input[2].content == [InputText(text="b")]


def test_item_references_structure_with_or_without_their_type():
    """{"type": "item_reference", "id"} and a bare {"id"} (OpenAI's schema makes the type
    optional) are item references; an extra field is still a 400 naming it."""
    req = structure({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"},
                                             {"id": "fc_2"}]}, CreateResponse)
    assert req.input == [ItemReference(id="msg_1"), ItemReference(id="fc_2")]
    with pytest.raises(InvalidRequest) as exc:
        structure({"model": "m", "input": [{"id": "x", "text": "y"}]}, CreateResponse)
    assert exc.value.param == "input[0].text"


def test_tool_items_structure_strictly():
    """function_call items are typed: a missing call_id is a 400 naming it."""
    with pytest.raises(InvalidRequest) as exc:
        structure({"model": "m", "input": [{"type": "function_call", "name": "f",
                                            "arguments": "{}"}]}, CreateResponse)
    assert exc.value.param == "input[0].call_id"


@pytest.mark.parametrize("body,param,fragment", [
    ({"model": 1}, "model", "expected a string"),
    ({"model": "m", "store": "yes"}, "store", "expected a boolean"),
    ({"model": "m", "top_logprobs": 1.5}, "top_logprobs", "expected an integer"),
    ({"model": "m", "extra": 1}, "extra", "Unknown parameter"),
    ({"model": "m", "text": {"format": {"type": "text", "bogus": 1}}}, "text.format.bogus",
     "Unknown parameter"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": 1}]}]},
     "input[0].content[0].text", "expected a string"),
    ({"model": "m", "input": [{"role": "user"}]}, "input[0].content", "Missing required"),
    ({}, "model", "Missing required"),
])
def test_errors_name_the_json_path(body, param, fragment):
    """Every structuring error is an InvalidRequest whose param is the offending path."""
    with pytest.raises(InvalidRequest) as exc:
        structure(body, CreateResponse)
    assert exc.value.param == param
    assert fragment in exc.value.message


def test_non_object_body_is_refused():
    """A JSON array or string body is a 400, not a crash."""
    with pytest.raises(InvalidRequest):
        structure([1, 2], CreateResponse)


@pytest.mark.parametrize("body,param,fragment", [
    ({"model": "m", "include": "reasoning.encrypted_content"}, "include",
     "expected an array, got string"),
    ({"model": "m", "stop": {"a": "b"}}, "stop", "expected an array, got object"),
    ({"model": "m", "context_management": {"type": "compaction"}}, "context_management",
     "expected an array, got object"),
    ({"model": "m", "input": [{"type": "reasoning", "summary": "thought"}]},
     "input[0].summary", "expected an array, got string"),
    ({"model": "m", "input": [{"role": "user", "content": [
        {"type": "output_text", "text": "x", "annotations": "abc"}]}]},
     "input[0].content[0].annotations", "expected an array, got string"),
])
def test_lists_take_json_arrays_only(body, param, fragment):
    """A string or an object where an array belongs is a 400 naming the field, never its
    characters or keys taken as the array's elements."""
    with pytest.raises(InvalidRequest) as exc:
        structure(body, CreateResponse)
    assert (exc.value.param, fragment in exc.value.message) == (param, True), exc.value.message


@pytest.mark.parametrize("body,param", [
    ({"model": "m", "text": "json"}, "text"),
    ({"model": "m", "context_management": ["compaction"]}, "context_management[0]"),
    ({"model": "m", "input": [{"type": "reasoning", "summary": ["thought"]}]},
     "input[0].summary[0]"),
])
def test_nested_objects_take_json_objects_only(body, param):
    """A scalar where an object belongs is a 400 that says an object was expected."""
    with pytest.raises(InvalidRequest) as exc:
        structure(body, CreateResponse)
    assert exc.value.param == param
    assert "expected an object, got string" in exc.value.message


@pytest.mark.parametrize("written,value", [(2.0, 2), (1e3, 1000), (-0.0, 0)])
def test_integers_may_be_written_without_a_fraction(written, value):
    """An integer field takes a number without a fraction as that integer (JSON Schema's
    `integer` admits 2.0, so the OpenAPI document does); 1.5, true and "2" stay 400s."""
    assert structure({"model": "m", "max_output_tokens": written},
                     CreateResponse).max_output_tokens == value
    for wrong in (1.5, True, "2", float("inf")):
        with pytest.raises(InvalidRequest) as exc:
            structure({"model": "m", "max_output_tokens": wrong}, CreateResponse)
        assert exc.value.param == "max_output_tokens"
