"""Tool declarations and tool_choice validation."""

import pytest

from triode.responses.objects import items_of
from triode.errors import InvalidRequest
from triode.responses.tools import (HOSTED_TYPES, declared_tools, hosted_types, parse_tool_choice,
                                    parse_tools)

FN = {"type": "function", "name": "get_weather", "description": "d",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def test_flat_and_nested_function_shapes_are_the_same_tool():
    """The Responses flat shape and the chat nested shape declare the same tool."""
    nested = {"type": "function", "function": {k: v for k, v in FN.items() if k != "type"}}
    a, = parse_tools([FN], hosted="error")
    b, = parse_tools([nested], hosted="error")
    assert a == b and a.for_template()["function"]["name"] == "get_weather"


def test_custom_and_namespace_tools():
    """Custom tools take one string input; namespace members are qualified for the template."""
    tools = parse_tools([
        {"type": "custom", "name": "patch", "description": "apply a patch"},
        {"type": "namespace", "name": "fs", "tools": [
            {"type": "function", "name": "read", "parameters": {"type": "object"}}]},
    ], hosted="error")
    assert tools[0].for_template()["function"]["parameters"]["required"] == ["input"]
    assert tools[1].chat_name == "fs.read" and tools[1].namespace == "fs"


@pytest.mark.parametrize("kind", sorted(HOSTED_TYPES))
def test_hosted_types_are_400_or_dropped(kind):
    """Every hosted type is a 400 naming it with --hosted-tools error, dropped with ignore."""
    with pytest.raises(InvalidRequest) as exc:
        parse_tools([FN, {"type": kind}], hosted="error")
    assert exc.value.param == "tools[1].type" and kind in exc.value.message
    assert [t.name for t in parse_tools([FN, {"type": kind}], hosted="ignore")] == ["get_weather"]


def test_hosted_types_lists_each_dropped_type_once():
    assert hosted_types([FN, {"type": "web_search"}, {"type": "mcp"}, {"type": "web_search"},
                         {"type": ["x"]}, "junk"]) == ("web_search", "mcp")
    assert hosted_types(None) == ()


@pytest.mark.parametrize("tool", [{"type": ["function"]}, {"type": {"a": 1}}, {"type": 3}, {}])
def test_a_tool_type_that_is_not_a_string_is_a_400_naming_it(tool):
    """A list or object as a tool's type is a 400 naming tools[i].type, not a TypeError."""
    with pytest.raises(InvalidRequest) as exc:
        parse_tools([FN, tool], hosted="ignore")
    assert exc.value.param == "tools[1].type"


@pytest.mark.parametrize("raw,param", [
    ([{"type": "function"}], "tools[0].name"),
    ([{"type": "function", "name": "f", "parameters": {"type": "array"}}], "tools[0].parameters"),
    ([{"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "ebnf",
                                                 "definition": "x"}}], "tools[0].format"),
    ([{"type": "frobnicate"}], "tools[0].type"),
    ([FN, FN], "tools"),
    ([5], "tools[0]"),
])
def test_bad_tools_name_the_field(raw, param):
    """Malformed tools are 400s whose param points at the field."""
    with pytest.raises(InvalidRequest) as exc:
        parse_tools(raw, hosted="error")
    assert exc.value.param == param


def test_tool_choice_modes():
    """none/auto/required/named/allowed_tools resolve to a mode and the names allowed."""
    tools = parse_tools([FN, {"type": "custom", "name": "patch"}], hosted="error")
    assert parse_tool_choice(None, tools).mode == "auto"
    assert parse_tool_choice("none", tools).allowed == ()
    assert parse_tool_choice("required", tools).allowed == ("get_weather", "patch")
    named = parse_tool_choice({"type": "function", "name": "get_weather"}, tools)
    assert (named.mode, named.allowed) == ("required", ("get_weather",))
    custom = parse_tool_choice({"type": "custom", "name": "patch"}, tools)
    assert custom.allowed == ("patch",)
    allowed = parse_tool_choice({"type": "allowed_tools", "mode": "auto",
                                 "tools": [{"type": "function", "name": "get_weather"}]}, tools)
    assert (allowed.mode, allowed.allowed) == ("auto", ("get_weather",))
    chat = parse_tool_choice({"type": "function", "function": {"name": "get_weather"}}, tools)
    assert chat.allowed == ("get_weather",)


@pytest.mark.parametrize("choice,tools", [
    ("required", []),
    ({"type": "function", "name": "missing"}, [FN]),
    ({"type": "custom", "name": "get_weather"}, [FN]),
    ("sometimes", [FN]),
    ({"type": "allowed_tools", "mode": "auto", "tools": []}, [FN]),
])
def test_impossible_tool_choices_are_400(choice, tools):
    """A named tool that is not declared, or required with no tools, is a 400."""
    with pytest.raises(InvalidRequest):
        parse_tool_choice(choice, parse_tools(tools, hosted="error"))


def test_additional_tools_items_join_the_tools_and_a_redeclared_tool_replaces_the_old():
    """Tools in additional_tools items (Codex's tool trees in the input) come first, then
    `tools`; declaring the same tool again replaces it in place (no duplicate-name 400);
    an invalid one is a 400 naming the item it came from."""
    history = [{"type": "additional_tools", "id": "at_1", "role": "developer", "tools": [
        {"type": "namespace", "name": "functions", "tools": [FN]},
        {"type": "web_search"}]},
        {"type": "additional_tools", "id": "at_2", "role": "developer",
         "tools": [{"type": "namespace", "name": "functions",
                    "tools": [{**FN, "description": "newer"}]}]}]
    raw, params = declared_tools(items_of(history), [{"type": "custom", "name": "patch"}])
    tools = parse_tools(raw, hosted="ignore", params=params)
    assert [(t.namespace, t.name, t.description) for t in tools] == [
        ("functions", "get_weather", "newer"), (None, "patch", None)]
    assert hosted_types(raw) == ("web_search",)
    bad = [{"type": "additional_tools", "id": "at_9", "role": "developer",
            "tools": [{"type": "function"}]}]
    raw, params = declared_tools(items_of(bad), None)
    with pytest.raises(InvalidRequest) as exc:
        parse_tools(raw, hosted="ignore", params=params)
    assert exc.value.param == "additional_tools[at_9].tools[0].name"
