import pytest

from triode.errors import InvalidRequest
from triode.model.families import NONE, family_for, plain

from .helpers import WEATHER, parsed


def test_none_is_the_plain_family():
    assert family_for("none") is plain.FAMILY is NONE


def test_everything_is_text():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>'
    assert parsed(NONE, text) == (text, [])


def test_calls_cannot_be_forced():
    with pytest.raises(InvalidRequest) as caught:
        NONE.tool_call_grammar([WEATHER], "required")
    assert caught.value.param == "tool_choice"
    assert "(none) cannot be forced" in caught.value.message
    assert NONE.text_format_grammar({"type": "json_object"}) is not None
