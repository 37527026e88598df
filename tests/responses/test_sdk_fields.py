"""Every request field the installed `openai` SDK defines is decided: docs/compatibility.md
has its row and triode's converter accepts it; a field outside the SDK is a 400 naming it.

The fields are walked out of the SDK's own parameter TypedDicts (`sdk_params`), so a field a
new SDK release adds fails here until it is given a row (and accepted)."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import pytest
import typing_extensions

from triode.errors import InvalidRequest
from triode.responses import convert, translate, wire
from triode.responses.conversations import ConversationUpdate, NewConversation, NewItems
from triode.responses.mcp import parse_servers
from triode.responses.tools import HOSTED_TYPES, parse_tools

from . import sdk_params
from .sdk_params import hints, required, typeddicts

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "compatibility.md"
# The tool types triode takes apart (`tools.parse_tools`, `mcp.parse_server`; the others are
# hosted: dropped or a 400).
TOOL_TYPES = ("function", "custom", "namespace", "mcp")
TAKEN = {"item": frozenset(wire.ITEM_TYPES),
         "part": frozenset({*convert.CONTENT_PARTS, "reasoning_text"}),
         "tool": frozenset(TOOL_TYPES)}
KEYS = sdk_params.keys(TAKEN)

# The wire class of each endpoint's body, and the least body it takes.
BODIES: dict[str, tuple[type, dict[str, Any]]] = {
    "create": (wire.CreateResponse, {"model": "m"}),
    "compact": (wire.CompactRequest, {"model": "m"}),
    "input_tokens": (wire.InputTokensRequest, {"model": "m"}),
    "conversations.create": (NewConversation, {}),
    "conversations.update": (ConversationUpdate, {"metadata": None}),
    "conversations.items.create": (NewItems, {"items": []}),
}
# Values the SDK allows that triode narrows on purpose (docs/compatibility.md says why),
# and the fields it requires that the SDK leaves optional.
NARROWED = {"create.context_management": [{"type": "compaction", "compact_threshold": 1000}]}
REQUIRED_HERE = {"item.function_call_output": {"call_id": "call_1"}}


def doc_rows() -> tuple[set[str], set[str]]:
    """The keys of docs/compatibility.md's rows: (the SDK's fields, the extra fields)."""
    sdk, extra = set(), set()
    rows = sdk
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            rows = extra if line.startswith("## Extra fields") else sdk
        match = re.match(r"\| `([^`]+)` \|", line)
        if match and not match.group(1).startswith(("chat.", "messages.", "completions.")):
            # (test_chat.py's, test_anthropic.py's and test_completions.py's)
            rows.add(match.group(1))
    return sdk, extra


# ---- plausible values of the SDK's types ---------------------------------------------------

def sample(hint: Any) -> Any:
    """A value of `hint` as a client would send it: each TypedDict with its required keys."""
    tp = sdk_params._unwrap(hint)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return args[0]
    if origin in (Union, types.UnionType):
        return sample(next(a for a in args if a is not type(None)))
    if typing_extensions.is_typeddict(tp):
        return build([tp], [])
    if origin is dict:
        return {"k": sample(args[1])}
    if args:                       # list, Iterable, SequenceNotStr
        return [sample(args[0])]
    return {str: "x", int: 1, float: 0.5, bool: False}.get(tp, {})


def build(classes: list[type], path: list[str]) -> dict[str, Any]:
    """The least object of one of `classes` that sets the field at `path` (a plausible
    value at its end)."""
    td = next(c for c in classes if not path or path[0] in hints(c))
    fields = hints(td)
    out = {name: sample(fields[name]) for name in required(td)}
    if path:
        out[path[0]] = toward(fields[path[0]], path[1:])
    return out


def toward(hint: Any, rest: list[str]) -> Any:
    """A value of `hint` whose nested objects lead to the field at `rest`."""
    if not rest:
        return sample(hint)
    tp = sdk_params._unwrap(hint)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if typing_extensions.is_typeddict(tp):
        return build([tp], rest)
    if origin in (Union, types.UnionType):
        return toward(next(a for a in args if any(rest[0] in hints(m) for m in typeddicts(a))),
                      rest)
    if origin is dict:
        return {"k": toward(args[1], rest)}
    return [toward(args[0], rest)]


def endpoint_of(key: str) -> str:
    """The endpoint whose body or query holds `key` ("" for items, parts and tools)."""
    return max((e for e in sdk_params.ENDPOINTS if key.startswith(e + ".")), key=len,
               default="")


def body_for(key: str) -> tuple[str, dict[str, Any]]:
    """(endpoint, a body that carries the field `key`) for a field of a body or of the
    items, parts and tools every create takes."""
    kind, _, rest = key.partition(".")
    if kind in TAKEN:
        tag, _, path = rest.partition(".")
        value = {**REQUIRED_HERE.get(f"{kind}.{tag}", {}),
                 **build(list(KEYS[f"{kind}.{tag}"].classes), path.split(".") if path else [])}
        if kind == "tool":
            return "create", {"model": "m", "tools": [value]}
        if kind == "item":
            return "create", {"model": "m", "input": [value]}
        holder = ({"type": "reasoning", "summary": [], "content": [value]}
                  if tag == "reasoning_text" else
                  {"role": "assistant" if tag in ("output_text", "refusal") else "user",
                   "content": [value]})
        return "create", {"model": "m", "input": [holder]}
    endpoint = endpoint_of(key)
    path = key[len(endpoint) + 1:].split(".")
    body = {**BODIES[endpoint][1],
            **build(list(sdk_params.ENDPOINTS[endpoint]), path)}
    for narrowed, value in NARROWED.items():
        if key.startswith(narrowed):
            body[narrowed.rsplit(".", 1)[1]] = value
    return endpoint, body


def in_query(key: str) -> bool:
    if key.split(".")[0] in TAKEN:
        return False
    endpoint = endpoint_of(key)
    names = sdk_params.QUERY.get(endpoint, ())
    return endpoint in sdk_params.QUERY and (names is None
                                             or key[len(endpoint) + 1:] in names)


def is_whole_type(key: str) -> bool:
    """An item, part or tool type triode does not take apart (one key, no fields)."""
    kind, _, rest = key.partition(".")
    return kind in TAKEN and "." not in rest and rest not in TAKEN[kind]


FIELDS = sorted(k for k in KEYS if not in_query(k) and not is_whole_type(k))


# ---- the tests -----------------------------------------------------------------------------

def test_every_sdk_field_has_a_row():
    """A field of the installed SDK without a row in docs/compatibility.md is undecided."""
    rows, _ = doc_rows()
    assert sorted(set(KEYS) - rows) == []


def test_every_row_names_a_field_of_the_sdk():
    """A row whose field the SDK no longer defines is stale."""
    rows, _ = doc_rows()
    assert sorted(rows - set(KEYS)) == []


@pytest.mark.parametrize("endpoint", sorted(BODIES))
def test_the_extra_rows_are_the_wire_fields_the_sdk_lacks(endpoint):
    """Every body field triode takes that the SDK does not define is a documented extra
    (input_tokens takes a create's body: its extras are create's fields)."""
    cls = BODIES[endpoint][0]
    sdk = {k[len(endpoint) + 1:] for k in KEYS if endpoint_of(k) == endpoint
           and "." not in k[len(endpoint) + 1:]}
    if endpoint == "input_tokens":
        sdk |= {k[len("create."):] for k in KEYS if k.startswith("create.")
                and "." not in k[len("create."):]}
        endpoint = "create"
    wire_fields = {wire.json_name(f) for f in cls.__attrs_attrs__}
    _, extra = doc_rows()
    assert wire_fields - sdk == {k[len(endpoint) + 1:] for k in extra
                                 if k.startswith(endpoint + ".")}


@pytest.mark.parametrize("key", FIELDS)
def test_each_field_is_accepted(key):
    """A body carrying the field, with a value its SDK type allows, is structured by the
    converter (and passes a create's request-level validation)."""
    endpoint, body = body_for(key)
    cls = BODIES[endpoint][0]
    req = convert.structure(body, cls)
    if endpoint in ("create", "input_tokens"):
        translate.validate(req)
    if key.startswith("tool.mcp"):
        if key.split(".")[2:3] in (["connector_id"], ["tunnel_id"]):   # no connectors here
            with pytest.raises(InvalidRequest) as exc:
                parse_servers(body["tools"])
            assert exc.value.param == f"tools[0].{key.split('.')[2]}"
        else:
            assert [s.label for s in parse_servers(body["tools"])] == [
                body["tools"][0]["server_label"]]
    elif key.startswith("tool."):
        assert parse_tools(body["tools"], hosted="error")


@pytest.mark.parametrize("key", sorted(k for k in KEYS if is_whole_type(k)
                                       and k.startswith("item.")))
def test_each_item_type_not_taken_is_a_400_naming_it(key):
    """An input item type triode does not take is a 400 naming the item, not a crash."""
    item = build(list(KEYS[key].classes), [])
    with pytest.raises(InvalidRequest) as exc:
        convert.structure({"model": "m", "input": [item]}, wire.CreateResponse)
    assert exc.value.param == "input[0]"


@pytest.mark.parametrize("key", sorted(k for k in KEYS if is_whole_type(k)
                                       and k.startswith("tool.")))
def test_each_tool_type_not_taken_is_hosted(key):
    """Every other tool type the SDK defines is a hosted tool: dropped by default, a 400
    naming it with --hosted-tools error."""
    tool = build(list(KEYS[key].classes), [])
    assert tool["type"] in HOSTED_TYPES
    assert parse_tools([tool], hosted="ignore") == []
    with pytest.raises(InvalidRequest) as exc:
        parse_tools([tool], hosted="error")
    assert exc.value.param == "tools[0].type"


def test_no_part_type_is_left_out():
    """Every content part type the SDK defines is one triode takes."""
    assert [k for k in KEYS if is_whole_type(k) and k.startswith("part.")] == []


@pytest.mark.parametrize("endpoint,body,param", [
    ("create", {"model": "m", "bogus": 1}, "bogus"),
    ("create", {"model": "m", "personality": "friendly"}, "personality"),
    ("create", {"model": "m", "input": [{"role": "user", "content": "x", "bogus": 1}]},
     "input[0].bogus"),
    ("create", {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "x",
         "prompt_cache_breakpoint": {"mode": "explicit", "bogus": 1}}]}]},
     "input[0].content[0].prompt_cache_breakpoint.bogus"),
    ("create", {"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "n",
                                         "arguments": "{}", "async_": True}]},
     "input[0].async_"),
    ("create", {"model": "m", "prompt": {"id": "p", "bogus": 1}}, "prompt.bogus"),
    ("create", {"model": "m", "prompt": {"id": "p", "variables": {
        "v": {"type": "input_text", "text": "x", "bogus": 1}}}}, "prompt.variables.v.bogus"),
    ("create", {"model": "m", "stream_options": {"include_usage": True}},
     "stream_options.include_usage"),
    ("create", {"model": "m", "moderation": {"model": "x", "policy": {"bogus": 1}}},
     "moderation.policy.bogus"),
    ("compact", {"model": "m", "prompt_cache_options": {"prewarm": True}},
     "prompt_cache_options.prewarm"),
    ("compact", {"model": "m", "prompt": {"id": "p"}}, "prompt"),
])
def test_a_field_outside_the_sdk_is_a_400_naming_it(endpoint, body, param):
    """Fields the SDK does not define (at any depth, or on another endpoint) stay refused."""
    with pytest.raises(InvalidRequest) as exc:
        convert.structure(body, BODIES[endpoint][0])
    assert exc.value.param == param and "Unknown parameter" in exc.value.message


@pytest.mark.parametrize("body,param", [
    ({"prompt": {"id": "p", "variables": {"v": 3}}}, "prompt.variables.v"),
    ({"prompt_cache_retention": "forever"}, "prompt_cache_retention"),
    ({"input": [{"role": "assistant", "content": "x", "phase": "analysis"}]}, "input[0].phase"),
    ({"background_options": {"completion_window": "1h"}}, "background_options.completion_window"),
])
def test_a_value_outside_the_sdk_is_a_400_naming_it(body, param):
    with pytest.raises(InvalidRequest) as exc:
        convert.structure({"model": "m", **body}, wire.CreateResponse)
    assert exc.value.param == param


def test_an_item_reference_may_have_a_null_type():
    """The SDK types an item reference's `type` as optional and nullable."""
    req = convert.structure({"model": "m", "input": [{"id": "msg_1", "type": None}]},
                            wire.CreateResponse)
    assert req.input == [wire.ItemReference(id="msg_1")]


def test_async_is_read_under_its_json_name():
    req = convert.structure({"model": "m", "input": [
        {"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}",
         "async": True, "caller": {"type": "program", "caller_id": "p1"}}]},
        wire.CreateResponse)
    assert req.input[0].async_ is True and req.input[0].caller.caller_id == "p1"


@pytest.mark.parametrize("body,param", [
    ({"max_tool_calls": -1}, "max_tool_calls"),
    ({"background_options": {"completion_window": "2h"}},
     "background_options.completion_window"),
])
def test_what_validation_refuses(body, param):
    with pytest.raises(InvalidRequest) as exc:
        translate.validate(convert.structure({"model": "m", **body}, wire.CreateResponse))
    assert exc.value.param == param


def test_deferred_windows_are_accepted_for_background_jobs():
    translate.validate(convert.structure(
        {"model": "m", "background": True, "background_options": {"completion_window": "8h"}},
        wire.CreateResponse))


NEW_FIELDS = {
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"mode": "explicit", "ttl": "12h", "prewarm": False,
                             "comparison_response_id": "resp_0"},
    "moderation": {"model": "omni-moderation-latest",
                   "policy": {"input": {"mode": "score"}, "output": {"mode": "block"}}},
    "background_options": {"completion_window": "soonest", "continuation_id": "c1"},
    "access_programs": {"cyber": "standard"},
    "image": {"context_compression": "auto"},
    "stream_options": {"include_obfuscation": False},
    "prompt": {"id": "pmpt_1", "version": "2", "variables": {"a": "x"}},
    "reasoning": {"mode": "standard"},
}


def test_the_response_echoes_what_it_can_and_the_sdk_model_reads_it():
    """The new fields' echoes (as given, or their effective values) make a response object
    the installed SDK's `Response` model validates."""
    from openai.types.responses import Response

    from triode.model.request import Sampling
    from triode.responses.objects import ResponseObject, plain

    echo = translate.plan(convert.structure({"model": "m", **NEW_FIELDS}, wire.CreateResponse),
                          Sampling()).echo
    obj = plain(ResponseObject.of("resp_1", echo, 0))
    assert obj["prompt_cache_retention"] == "24h"
    assert obj["prompt_cache_options"] == {"mode": "explicit", "ttl": "12h",
                                           "comparison_response_id": "resp_0"}
    assert obj["prompt"] == {"id": "pmpt_1", "version": "2", "variables": {"a": "x"}}
    assert obj["access_programs"] == {"cyber": "standard"}
    assert obj["image"] == {"context_compression": "disabled"}
    assert obj["moderation"] is None       # results, and there are none
    Response.model_validate(obj)
    empty = plain(ResponseObject.of("resp_2", translate.plan(
        convert.structure({"model": "m", "prompt_cache_options": {}, "access_programs": {}},
                          wire.CreateResponse), Sampling()).echo, 0))
    assert empty["prompt_cache_options"] == {"mode": "implicit", "ttl": "30m",
                                             "comparison_response_id": None}
    assert empty["access_programs"] is None and empty["prompt"] is None
    Response.model_validate(empty)
