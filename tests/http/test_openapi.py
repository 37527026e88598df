"""The OpenAPI document: valid OpenAPI 3.1, every mounted route in it, request schemas that
accept exactly what the converter accepts, and answer schemas that the real builders'
objects meet (schemathesis checks the served document against a real server in
tests/e2e/test_openapi.py)."""

from __future__ import annotations

import json

import pytest

from triode.responses.anthropic import MessagesRequest
from triode.responses.chat import ChatRequest
from triode.responses.completions import CompletionRequest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_openapi
from quart import Quart

from triode.errors import InvalidRequest, NotFound
from triode.http.app import OPEN_PATHS, create_app
from triode.http.openapi import document
from triode.model.request import Sampling
from triode.responses import translate, wire
from triode.responses.builder import ResponseBuilder
from triode.responses.compaction import compaction_item
from triode.responses.conversations import (ConversationUpdate, NewConversation, NewItems,
                                            Paging, conversation_object, deleted_object,
                                            item_list, page)
from triode.responses.convert import structure
from triode.responses.objects import ResponseError, plain, usage
from triode.responses.items import canonical
from triode.responses.lifecycle import Status

MODEL = "m"
APP = create_app(None)
DOC = document(APP, model=MODEL)


def validator(name: str) -> Draft202012Validator:
    """A validator for one component schema, its $refs resolved in the document."""
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}",
                                 "components": DOC["components"]})


def test_the_document_is_valid_openapi_3_1():
    """openapi-spec-validator accepts it as OpenAPI 3.1, and schemathesis loads it."""
    assert DOC["openapi"].startswith("3.1")
    validate_openapi(DOC)
    assert len(list(schemathesis.openapi.from_dict(DOC).get_all_operations())) == sum(
        len(operations) for operations in DOC["paths"].values())


def test_every_mounted_route_is_in_the_document():
    """Each url_map rule, with each of its methods (a WebSocket as its GET), is one
    operation; and the document has no other."""
    mounted = set()
    for rule in APP.url_map.iter_rules():
        path = rule.rule.replace("<path:", "<").replace("<", "{").replace(">", "}")
        methods = {"GET"} if rule.websocket else rule.methods - {"HEAD", "OPTIONS"}
        mounted |= {(path, method.lower()) for method in methods}
    documented = {(path, method) for path, operations in DOC["paths"].items()
                  for method in operations}
    assert documented == mounted
    assert ("/v1/openapi.json", "get") in documented and ("/openapi.json", "get") in documented


def test_a_route_without_a_contract_fails_the_document():
    """A view mounted without `@documented` makes generation fail, naming the route."""
    app = Quart(__name__, static_folder=None)

    @app.route("/v1/undocumented")
    async def undocumented() -> str:
        return ""

    with pytest.raises(LookupError, match="/v1/undocumented"):
        document(app)


def test_open_paths_are_the_public_operations():
    """The routes the app lets in without the API key are the ones documented without
    security (and with no 401), and no others."""
    public = {path for path, operations in DOC["paths"].items()
              for op in operations.values() if op.get("security") == []}
    assert public == set(OPEN_PATHS)
    for path in public:
        assert "401" not in DOC["paths"][path]["get"]["responses"]
    assert all("401" in op["responses"] for path, operations in DOC["paths"].items()
               if path not in public for op in operations.values())


# ---- request bodies: the schema accepts what the converter accepts ------------------------

ACCEPTED = [
    {"model": MODEL},
    {"model": MODEL, "input": "hi", "stop": "x", "tool_choice": "auto", "conversation": "c"},
    {"model": MODEL, "input": [{"role": "user", "content": "hi"}, {"id": "msg_1"},
                               {"type": "item_reference", "id": "msg_2"},
                               {"role": "assistant", "id": "m", "content": [
                                   {"type": "output_text", "text": "a", "annotations": [1]},
                                   {"type": "refusal", "refusal": "no"}]}]},
    {"model": MODEL, "input": [{"type": "function_call", "call_id": "c", "name": "f",
                                "arguments": "{}"},
                               {"type": "function_call_output", "call_id": "c",
                                "output": [{"type": "input_text", "text": "r"}]},
                               {"type": "reasoning", "summary": [{"text": "t"}]},
                               {"type": "additional_tools", "tools": [{}], "role": "system"}]},
    {"model": MODEL, "temperature": 1, "top_p": 0.5, "max_output_tokens": 3, "seed": -1,
     "stop": ["a", "b"], "metadata": {"k": "v"}, "include": ["reasoning.encrypted_content"],
     "text": {"format": {"type": "json_schema", "schema": {}, "name": "x"}},
     "context_management": [{"type": "compaction", "compact_threshold": 10}],
     "truncation": "auto", "tools": [{"type": "function", "name": "f"}]},
    {"model": MODEL, "instructions": None, "text": {"format": None}, "reasoning": None},
]
REFUSED = [
    {},                                                   # model is required
    {"model": 1},
    {"model": MODEL, "extra": 1},                         # unknown fields
    {"model": MODEL, "text": {"format": {"type": "text", "bogus": 1}}},
    {"model": MODEL, "store": 1},                         # no int for a bool ...
    {"model": MODEL, "max_output_tokens": True},          # ... nor a bool for an int
    {"model": MODEL, "max_output_tokens": 1.5},
    {"model": MODEL, "include": "reasoning.encrypted_content"},   # a string is no array
    {"model": MODEL, "stop": {"a": "b"}},
    {"model": MODEL, "input": {"role": "user"}},
    {"model": MODEL, "input": [{"content": "no role, no type"}]},
    {"model": MODEL, "input": [{"id": "x", "text": "an item_reference has only an id"}]},
    {"model": MODEL, "input": [{"type": None, "role": "user", "content": "x"}]},
    {"model": MODEL, "input": [{"role": "user", "content": [{"text": "a part needs a type"}]}]},
    {"model": MODEL, "input": [{"role": "robot", "content": "x"}]},
    {"model": MODEL, "input": [{"type": "message", "content": "x"}]},
    {"model": MODEL, "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
    {"model": MODEL, "input": [{"type": "reasoning", "summary": "not a list"}]},
    {"model": MODEL, "tool_choice": 1},
    {"model": MODEL, "metadata": {"k": 1}},
    {"model": MODEL, "context_management": [{"type": "compaction"}]},
    {"model": MODEL, "reasoning": "high"},
]


@pytest.mark.parametrize("body", ACCEPTED)
def test_bodies_the_converter_accepts_meet_the_schema(body):
    structure(body, wire.CreateResponse)
    assert validator("CreateResponse").is_valid(body)


@pytest.mark.parametrize("body", REFUSED)
def test_bodies_the_converter_refuses_fail_the_schema(body):
    with pytest.raises(InvalidRequest):
        structure(body, wire.CreateResponse)
    assert not validator("CreateResponse").is_valid(body)


@pytest.mark.parametrize("body,param", [
    ({"model": MODEL, "temperature": 2.5}, "temperature"),
    ({"model": MODEL, "top_logprobs": 21}, "top_logprobs"),
    ({"model": MODEL, "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": MODEL, "repetition_penalty": 0}, "repetition_penalty"),
    ({"model": MODEL, "stop": [""]}, "stop[0]"),
    ({"model": MODEL, "stop": ["s"] * 17}, "stop"),
    ({"model": MODEL, "truncation": "sometimes"}, "truncation"),
    ({"model": MODEL, "include": ["everything"]}, "include[0]"),
    ({"model": MODEL, "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"model": MODEL, "metadata": {"k": "v" * 513}}, "metadata.k"),
    ({"model": MODEL, "max_tool_calls": -1}, "max_tool_calls"),
])
def test_what_validation_refuses_the_schema_states(body, param):
    """Bounds and accepted values that validation (not the converter) enforces are in the
    schema too, from the same constants."""
    with pytest.raises(InvalidRequest) as exc:
        translate.validate(structure(body, wire.CreateResponse))
    assert exc.value.param == param
    assert not validator("CreateResponse").is_valid(body)


@pytest.mark.parametrize("name,body,ok", [
    ("NewItems", {"items": [{"role": "user", "content": "x"}] * 20}, True),
    ("NewItems", {"items": [{"role": "user", "content": "x"}] * 21}, False),
    ("NewItems", {}, False),
    ("CompactRequest", {"model": MODEL, "keep_tokens": 1}, True),
    ("CompactRequest", {"model": MODEL, "stream": True}, False),
    ("InputTokensRequestWithModelDefaulted", {"input": "hi"}, True),
    ("InputTokensRequestWithModelDefaulted", {"input": "hi", "personality": "x"}, True),
    ("InputTokensRequestWithModelDefaulted", {"input": "hi", "extra": 1}, False),
    ("CreateResponse", {"model": MODEL, "personality": "x"}, False),
])
def test_other_bodies(name, body, ok):
    """The other request bodies are generated the same way (here: conversation items'
    limit, the fields /compact only parses to refuse, and input_tokens' optional model)."""
    assert validator(name).is_valid(body) is ok


def test_input_tokens_documents_its_optional_model():
    body = DOC["paths"]["/v1/responses/input_tokens"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith(
        "/InputTokensRequestWithModelDefaulted")


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(-1, 3),
                    st.sampled_from(["", "x", MODEL, "user", "message", "input_text",
                                     "function_call", "item_reference", "text", "auto"]))
KEYS = st.sampled_from(["type", "role", "content", "text", "id", "call_id", "name",
                        "arguments", "output", "summary", "format", "annotations", "x"])
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=4)), max_leaves=10)
FIELDS = sorted(f.name for f in wire.CreateResponse.__attrs_attrs__)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replaced=st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=3))
def test_the_schema_and_the_converter_agree_on_random_bodies(replaced):
    """Whatever the converter and validation accept meets the schema, and whatever meets
    the schema the converter accepts (validation may still refuse what no schema states:
    a field combination, a model name)."""
    body = {"model": MODEL, **replaced}
    try:
        req = structure(body, wire.CreateResponse)
    except InvalidRequest:
        converted = False
    else:
        converted = True
        try:
            translate.validate(req)
            accepted = True
        except InvalidRequest:
            accepted = False
        if accepted:
            assert validator("CreateResponse").is_valid(body), body
    if validator("CreateResponse").is_valid(body):
        assert converted, body


BODIES = {"CreateResponse": wire.CreateResponse, "CompactRequest": wire.CompactRequest,
          "InputTokensRequestWithModelDefaulted": wire.InputTokensRequest,
          "NewConversation": NewConversation, "ConversationUpdate": ConversationUpdate,
          "NewItems": NewItems, "ChatRequest": ChatRequest,
          "MessagesRequest": MessagesRequest, "CompletionRequest": CompletionRequest}


@pytest.mark.parametrize("path,method", [
    (path, method) for path, operations in DOC["paths"].items() if path.startswith("/v1/")
    for method, op in operations.items() if "requestBody" in op])
def test_schema_generated_bodies_are_structured(path, method):
    """Bodies schemathesis generates from the document (what the e2e fuzzing sends as
    valid) all get through the converter."""
    ref = DOC["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    cls = BODIES[ref["$ref"].rsplit("/", 1)[1]]
    operation = schemathesis.openapi.from_dict(DOC)[path][method.upper()]

    @settings(max_examples=100, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy())
    def run(case):
        body = json.loads(json.dumps(case.body))
        if path == "/v1/responses/input_tokens":
            body.setdefault("model", MODEL)     # as the route does
        structure(body, cls)

    run()


# ---- answers: what the builders make meets the answer schemas -----------------------------

def response_events() -> tuple[dict, list[dict]]:
    """A response built as a supervisor builds one: created, reasoning, text, a tool call,
    completed."""
    req = structure({"model": MODEL, "input": "hi", "metadata": {"a": "b"},
                     "reasoning": {"effort": "low", "context": "all_turns"},
                     "text": {"verbosity": "low"}, "conversation": None,
                     "tools": [{"type": "function", "name": "f"}]}, wire.CreateResponse)
    plan = translate.plan(req, Sampling(), conversation="conv_1")
    builder = ResponseBuilder("resp_1", plan.echo)
    builder.created()
    builder.enter(Status.IN_PROGRESS)
    builder.reasoning("thinking")
    builder.reasoning_done("thinking")
    builder.text("Hello", [{"token": "Hello", "logprob": -0.1}])
    builder.call_start(0, kind="function", name="f", namespace="ns")
    builder.call_delta(0, "{}")
    builder.call_done(0, "{}")
    builder.enter(Status.COMPLETED, usage(3, 4))
    return plain(builder.obj), [plain(e) for e in builder.events]


def test_built_responses_and_their_events_meet_the_schemas():
    obj, events = response_events()
    validator("ResponseObject").validate(obj)
    for event in events:
        validator("StreamEvent").validate(event)
    assert {e["type"] for e in events} >= {"response.created", "response.output_item.added",
                                           "response.output_text.delta", "response.completed"}


@pytest.mark.parametrize("end", ["fail", "cancel", "background"])
def test_failed_cancelled_and_queued_responses_meet_the_schema(end):
    plan = translate.plan(structure({"model": MODEL, "input": "hi"}, wire.CreateResponse),
                          Sampling())
    builder = ResponseBuilder("resp_1", plan.echo, background=end == "background")
    builder.created()
    builder.text("partial")
    if end == "fail":
        builder.enter(Status.FAILED, None, ResponseError("server_error", "boom"))
    elif end == "cancel":
        builder.enter(Status.CANCELLED)
    validator("ResponseObject").validate(plain(builder.obj))


def canonical_items() -> list[dict]:
    body = {"input": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "a"},
                                          {"type": "refusal", "refusal": "no"}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}",
         "namespace": "ns"},
        {"type": "function_call_output", "call_id": "c", "output": "r"},
        {"type": "custom_tool_call", "call_id": "d", "name": "g", "input": "x"},
        {"type": "custom_tool_call_output", "call_id": "d",
         "output": [{"type": "input_text", "text": "r"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}],
         "content": [{"text": "t"}], "encrypted_content": "e"},
        {"type": "additional_tools", "tools": [{"type": "function", "name": "h"}]},
        {"type": "mcp_list_tools", "server_label": "s", "tools": [
            {"name": "t", "input_schema": {"type": "object"}, "annotations": None}]},
        {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "s", "name": "t",
         "arguments": "{}"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
        {"type": "mcp_call", "server_label": "s", "name": "t", "arguments": "{}",
         "output": "r", "approval_request_id": "mcpr_1"},
    ]}
    items = [canonical(item, f"input[{i}]")
             for i, item in enumerate(structure(body, wire.ItemList).input)]
    body = {"input": [plain(compaction_item("the summary", items[:2]))]}
    return plain([*items, canonical(structure(body, wire.ItemList).input[0],
                                    f"input[{len(items)}]")])


def test_canonical_items_meet_the_item_schema():
    """Every kind of input item, as stored and listed, is one of the item schemas."""
    items = canonical_items()
    assert {item["type"] for item in items} == \
        set(wire.ITEM_TYPES) - {"item_reference", "compaction_trigger"}   # never kept
    validator("ItemPage").validate(page(items, Paging()))
    validator("ItemPage").validate(item_list(items))
    validator("ItemPage").validate(page([], Paging(limit=1)))


def test_conversation_objects_and_errors_meet_their_schemas():
    validator("ConversationObject").validate(conversation_object("conv_1", 1, {"a": "b"}))
    validator("ConversationDeleted").validate(deleted_object("conv_1"))
    validator("ErrorBody").validate(NotFound("gone", param="response_id").body())
    validator("ErrorBody").validate(InvalidRequest("bad").body())
    assert not validator("ConversationDeleted").is_valid(
        {"id": "conv_1", "object": "conversation.deleted", "deleted": False})
