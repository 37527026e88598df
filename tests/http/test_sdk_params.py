"""Every field of every request the installed openai SDK makes to a route triode serves is a
field that route takes (issue 43): its body's wire type has it, or its contract declares it as
a query parameter. The SDK's params types are found by walking its packages, so a new params
type fails here until it is mapped to its route (or said not to be served), and a new field
fails naming the endpoint and the field. What each field does is docs/compatibility.md's
(tests/responses/test_compatibility_doc.py and the e2e field tests)."""

from __future__ import annotations

import importlib
import pkgutil
import typing

import attrs
import pytest

from triode.http.app import create_app
from triode.http.contract import OPERATIONS

APP = create_app(None)

# openai.types.<module>: (HTTP method, a path as the SDK requests it, the params TypedDicts).
SERVED: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "responses.response_create_params": (
        "POST", "/v1/responses",
        ("ResponseCreateParamsNonStreaming", "ResponseCreateParamsStreaming")),
    "responses.response_retrieve_params": (
        "GET", "/v1/responses/resp_1",
        ("ResponseRetrieveParamsNonStreaming", "ResponseRetrieveParamsStreaming")),
    "responses.input_item_list_params": (
        "GET", "/v1/responses/resp_1/input_items", ("InputItemListParams",)),
    "responses.input_token_count_params": (
        "POST", "/v1/responses/input_tokens", ("InputTokenCountParams",)),
    "responses.response_compact_params": (
        "POST", "/v1/responses/compact", ("ResponseCompactParams",)),
    "conversations.conversation_create_params": (
        "POST", "/v1/conversations", ("ConversationCreateParams",)),
    "conversations.conversation_update_params": (
        "POST", "/v1/conversations/conv_1", ("ConversationUpdateParams",)),
    "conversations.item_create_params": (
        "POST", "/v1/conversations/conv_1/items", ("ItemCreateParams",)),
    "conversations.item_list_params": (
        "GET", "/v1/conversations/conv_1/items", ("ItemListParams",)),
    "conversations.item_retrieve_params": (
        "GET", "/v1/conversations/conv_1/items/msg_1", ("ItemRetrieveParams",)),
    "chat.completion_create_params": (
        "POST", "/v1/chat/completions",
        ("CompletionCreateParamsNonStreaming", "CompletionCreateParamsStreaming")),
    "completion_create_params": (
        "POST", "/v1/completions",
        ("CompletionCreateParamsNonStreaming", "CompletionCreateParamsStreaming")),
}
# The SDK's params types of those packages for routes triode does not serve, and why.
NOT_SERVED = {
    "chat.completion_list_params": "stored Chat Completions (listed, updated, their "
                                   "messages) are not kept: docs/compatibility.md",
    "chat.completion_update_params": "stored Chat Completions are not kept",
    "chat.completions.message_list_params": "stored Chat Completions are not kept",
}
PACKAGES = ("responses", "conversations", "chat")


def params_modules() -> set[str]:
    """Every `*_params` module of the SDK's packages whose routes triode serves (and the
    legacy Completions' one)."""
    import openai.types

    found = {"completion_create_params"}
    for package in PACKAGES:
        module = importlib.import_module(f"openai.types.{package}")
        for info in pkgutil.walk_packages(module.__path__, f"openai.types.{package}."):
            if info.name.endswith("_params"):
                found.add(info.name.removeprefix("openai.types."))
    assert hasattr(openai.types, "completion_create_params")
    return found


def test_every_params_type_of_the_sdk_is_mapped_to_its_route():
    unmapped = params_modules() - set(SERVED) - set(NOT_SERVED)
    assert not unmapped, (f"the openai SDK has params types no test maps to a route: "
                          f"{sorted(unmapped)}; map each to the route it requests (SERVED) or "
                          "say why it is not served (NOT_SERVED)")
    assert not (set(SERVED) | set(NOT_SERVED)) - params_modules()


def accepted(method: str, path: str) -> tuple[set[str], set[str]]:
    """(the body's fields, the query parameters and path variables) of the route."""
    endpoint, variables = APP.url_map.bind("localhost").match(path, method)
    operation = OPERATIONS[APP.view_functions[endpoint]]
    body = {f.name for f in attrs.fields(operation.body)} if operation.body else set()
    return body, {p.name for p in operation.query} | set(variables)


@pytest.mark.parametrize("module", sorted(SERVED))
def test_every_field_the_sdk_sends_is_one_the_route_takes(module):
    method, path, names = SERVED[module]
    types = importlib.import_module(f"openai.types.{module}")
    body, query = accepted(method, path)
    takes = body | query
    for name in names:
        fields = set(typing.get_type_hints(getattr(types, name)))
        missing = sorted(fields - takes)
        assert not missing, (f"{method} {path}: the openai SDK's {name} has {missing}, "
                             "which the route does not take")
